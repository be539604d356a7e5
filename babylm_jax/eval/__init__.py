"""Evaluation: a sub-room per track (zero_shot/, finetune/, fmri/); here the session, runner, results, gather."""
