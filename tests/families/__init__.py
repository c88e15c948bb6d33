"""Test-only env families written against operant.envs.contract alone (issue 13's "the
contract holds by construction"): importing `tests.families.frame` or `tests.families.agents`
registers the family and a policy for its observations, as a third-party package would.

`common` holds what both share."""
