"""What both pipelines' confirm runners share, and neither owns.

compat/confirm/ (speculators 0.3.0 / 0.4.x's generator) and compat/serve/ (speculators >= 0.5 through vllm serve)
judge hidden states by the same bounds and routing margins, read the same prompts, size the same host memory and
parse the same command line; so those live here, and the two pipelines never import each other.

``arguments``    compat confirm's command line        ``options``      the options both paths resolve alike
``tolerance``    the per-layer bounds (the judge)     ``routing``      MoE routing margins, the ties they excuse
``figures``      the figures a verdict is judged from ``prompts``      a --prompts file
``host_memory``  the engines' host memory on CPU      ``report_file``  a report file, before --check knows its path
"""
