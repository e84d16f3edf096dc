"""The advise stage: from a user's traffic to "enable HiCache? which policy? how big a pool?".

`advice` (one run, input to record), `curve` (hit rate at every size, one pass), `working_set`,
`grid` (the exact what-if engine around the knee), `physics` (modelled TTFT, throughput, goodput),
`breakeven` (per tier), `recommend` (the steps), `confirm` (the top K live on the sim), and one writer
per output (`markdown`, `html`, `json_out`).
"""
