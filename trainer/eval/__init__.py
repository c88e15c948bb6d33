"""`operant eval`: a trained policy's episodes, what is evaluated, and videos."""
