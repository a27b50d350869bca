"""Reading results against the oracle: the tolerance policy, divergence localization, the life of
a tensor (`trace`, `trace_plot`) and the audit of the source articles' claims."""
