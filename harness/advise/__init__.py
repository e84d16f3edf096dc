"""The advise stage: from a user's traffic to "enable HiCache? which policy? how big a pool?".

`inputs` (the what-if reader plus the card and model), `curve` (hit rate at every size, one pass),
`working_set`, `grid` (the exact what-if engine around the knee), `breakeven` (per tier),
`recommend` (the steps), and one writer per output (`markdown`, `html`, `json_out`).
"""
