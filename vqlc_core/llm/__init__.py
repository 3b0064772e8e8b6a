"""Language-model judges and concept labels. Lowest first: the endpoint, the record of answers
and the chat client (`endpoint`, `records`, `client`) and the offline default server
(`localserver`); facts about a run both sides need (`runfacts`); judging (`judge_items`,
`judge_prompts`, `agreement`, `judge_results`, `judge`); labelling (`contexts`,
`label_prompts`, `detection`, the labels file `labels`, and `labelling`)."""
