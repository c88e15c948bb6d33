/* MinAtar's SpaceInvaders (space_invaders.py). np.roll wraps: the alien block's step down
 * moves row 9 to row 0 (only on a step that also ends the game), a step sideways is never taken
 * at an edge. Part of minatar.h (its batch entry points run it). */
#ifndef OPERANT_MINATAR_SPACE_INVADERS_H
#define OPERANT_MINATAR_SPACE_INVADERS_H

#include "minatar_common.h"

/* SpaceInvaders: channels cannon, alien, alien_left, alien_right, friendly_bullet,
 * enemy_bullet; three maps. No randomness at all. */
enum { SI_LAST_ACTION = 0, SI_POS, SI_ALIEN_DIR, SI_ENEMY_MOVE_INTERVAL, SI_ALIEN_MOVE_TIMER,
       SI_ALIEN_SHOT_TIMER, SI_RAMP_INDEX, SI_SHOT_TIMER, SI_SCALARS };
enum { SI_MAP_ALIEN = 0, SI_MAP_F_BULLET, SI_MAP_E_BULLET, SI_MAPS };
enum { SI_CH_CANNON = 0, SI_CH_ALIEN, SI_CH_ALIEN_LEFT, SI_CH_ALIEN_RIGHT, SI_CH_F_BULLET,
       SI_CH_E_BULLET, SI_CHANNELS };
#define SI_SHOT_COOL_DOWN 5
#define SI_INIT_MOVE_INTERVAL 12
#define SI_ENEMY_SHOT_INTERVAL 10


static void space_invaders_reset(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *aliens = MA_MAP(m, SI_MAP_ALIEN, i);
    int row;
    MA_S(m, SI_POS, i) = 5;
    memset(MA_MAP(m, SI_MAP_F_BULLET, i), 0, MA_CELLS);
    memset(MA_MAP(m, SI_MAP_E_BULLET, i), 0, MA_CELLS);
    memset(aliens, 0, MA_CELLS);
    for (row = 0; row < 4; row++) memset(aliens + row * 10 + 2, 1, 6);
    MA_S(m, SI_ALIEN_DIR, i) = -1;
    MA_S(m, SI_ENEMY_MOVE_INTERVAL, i) = SI_INIT_MOVE_INTERVAL;
    MA_S(m, SI_ALIEN_MOVE_TIMER, i) = SI_INIT_MOVE_INTERVAL;
    MA_S(m, SI_ALIEN_SHOT_TIMER, i) = SI_ENEMY_SHOT_INTERVAL;
    MA_S(m, SI_RAMP_INDEX, i) = 0;
    MA_S(m, SI_SHOT_TIMER, i) = 0;
}

static inline int si_column_has(const uint8_t *map, int col) {
    int row;
    for (row = 0; row < 10; row++) {
        if (map[row * 10 + col]) return 1;
    }
    return 0;
}

/* Remove every alien a friendly bullet has reached, and that bullet; how many. Branch-free
 * over bytes that are 0 or 1, so it vectorises. */
static inline int si_kill(uint8_t *__restrict__ aliens, uint8_t *__restrict__ f_bullets) {
    int c, kills = 0;
    for (c = 0; c < MA_CELLS; c++) {
        uint8_t hit = aliens[c] & f_bullets[c];
        kills += hit;
        aliens[c] ^= hit;
        f_bullets[c] ^= hit;
    }
    return kills;
}

static double space_invaders_step(op_batch *b, int64_t i, int *terminated) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *aliens = MA_MAP(m, SI_MAP_ALIEN, i);
    uint8_t *f_bullets = MA_MAP(m, SI_MAP_F_BULLET, i);
    uint8_t *e_bullets = MA_MAP(m, SI_MAP_E_BULLET, i);
    uint8_t rolled[MA_CELLS];
    int a = ma_effective_action(m, i), row, col, kills;
    /* the rules keep pos in 0..9; a loaded state that does not is clamped, never indexed */
    int32_t pos = ma_min(9, ma_max(0, MA_S(m, SI_POS, i))), dir = MA_S(m, SI_ALIEN_DIR, i);

    if (a == MA_FIRE && MA_S(m, SI_SHOT_TIMER, i) == 0) {
        f_bullets[90 + pos] = 1;
        MA_S(m, SI_SHOT_TIMER, i) = SI_SHOT_COOL_DOWN;
    } else if (a == MA_LEFT) {
        pos = ma_max(0, pos - 1);
    } else if (a == MA_RIGHT) {
        pos = ma_min(9, pos + 1);
    }
    /* friendly bullets up a row, enemy bullets down a row (roll, then clear the wrapped row) */
    memmove(f_bullets, f_bullets + 10, 90);
    memset(f_bullets + 90, 0, 10);
    memmove(e_bullets + 10, e_bullets, 90);
    memset(e_bullets, 0, 10);
    if (e_bullets[90 + pos]) *terminated = 1;

    if (aliens[90 + pos]) *terminated = 1;
    if (MA_S(m, SI_ALIEN_MOVE_TIMER, i) == 0) {
        MA_S(m, SI_ALIEN_MOVE_TIMER, i) = ma_min(ma_count(aliens),
                                                 MA_S(m, SI_ENEMY_MOVE_INTERVAL, i));
        if ((si_column_has(aliens, 0) && dir < 0) || (si_column_has(aliens, 9) && dir > 0)) {
            dir = -dir;
            for (col = 0; col < 10; col++) {
                if (aliens[90 + col]) *terminated = 1;
            }
            memcpy(rolled, aliens + 90, 10);
            memmove(aliens + 10, aliens, 90);
            memcpy(aliens, rolled, 10);
        } else {
            int shift = ((dir % 10) + 10) % 10;
            memcpy(rolled, aliens, MA_CELLS);
            for (row = 0; row < 10; row++) {
                for (col = 0; col < 10; col++) {
                    aliens[row * 10 + (col + shift) % 10] = rolled[row * 10 + col];
                }
            }
        }
        if (aliens[90 + pos]) *terminated = 1;
    }
    if (MA_S(m, SI_ALIEN_SHOT_TIMER, i) == 0) {
        int d;
        MA_S(m, SI_ALIEN_SHOT_TIMER, i) = SI_ENEMY_SHOT_INTERVAL;
        /* _nearest_alien: columns by distance from the cannon, the left one first on a tie;
         * the lowest alien of the first column that has one shoots */
        for (d = 0; d < 10; d++) {
            int candidates[2] = {pos - d, d > 0 ? pos + d : -1}, k, found = 0;
            for (k = 0; k < 2 && !found; k++) {
                col = candidates[k];
                if (col < 0 || col > 9 || !si_column_has(aliens, col)) continue;
                for (row = 9; row >= 0; row--) {
                    if (aliens[row * 10 + col]) break;
                }
                e_bullets[row * 10 + col] = 1;
                found = 1;
            }
            if (found) break;
        }
    }
    kills = si_kill(aliens, f_bullets);
    MA_S(m, SI_SHOT_TIMER, i) -= MA_S(m, SI_SHOT_TIMER, i) > 0;
    MA_S(m, SI_ALIEN_MOVE_TIMER, i) -= 1;
    MA_S(m, SI_ALIEN_SHOT_TIMER, i) -= 1;
    if (!ma_any(aliens)) {
        if (MA_S(m, SI_ENEMY_MOVE_INTERVAL, i) > 6 && m->ramping) {
            MA_S(m, SI_ENEMY_MOVE_INTERVAL, i) -= 1;
            MA_S(m, SI_RAMP_INDEX, i) += 1;
        }
        for (row = 0; row < 4; row++) memset(aliens + row * 10 + 2, 1, 6);
    }
    MA_S(m, SI_POS, i) = pos;
    MA_S(m, SI_ALIEN_DIR, i) = dir;
    return (double)kills;
}

/* The maps are the observation's channels as they are: whole-channel copies of constant size,
 * which the compiler turns into a few vector moves. */
static void space_invaders_obs(op_batch *b, int64_t i) {
    ma_batch *m = (ma_batch *)b;
    uint8_t *o = ma_obs_row(m, i);
    const uint8_t *aliens = MA_MAP(m, SI_MAP_ALIEN, i);
    int left = MA_S(m, SI_ALIEN_DIR, i) < 0;
    memset(o + SI_CH_CANNON * MA_CELLS, 0, MA_CELLS);
    ma_put(o, SI_CH_CANNON, 9, MA_S(m, SI_POS, i), 1);
    memcpy(o + SI_CH_ALIEN * MA_CELLS, aliens, MA_CELLS);
    memcpy(o + (left ? SI_CH_ALIEN_LEFT : SI_CH_ALIEN_RIGHT) * MA_CELLS, aliens, MA_CELLS);
    memset(o + (left ? SI_CH_ALIEN_RIGHT : SI_CH_ALIEN_LEFT) * MA_CELLS, 0, MA_CELLS);
    memcpy(o + SI_CH_F_BULLET * MA_CELLS, MA_MAP(m, SI_MAP_F_BULLET, i), MA_CELLS);
    memcpy(o + SI_CH_E_BULLET * MA_CELLS, MA_MAP(m, SI_MAP_E_BULLET, i), MA_CELLS);
}

#endif
