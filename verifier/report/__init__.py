"""The conformance report of `verifier check`: what pytest found, property x model.

`collect` is a pytest plugin that records every test's outcome and the user properties the
suite leaves (keys in `results`); `suite` finds the property suite and runs pytest on it in a
process of its own, `inprocess` in this one (`check`, which returns the report);
`render` draws the table as text and Markdown; `output` writes the report files; `plot` draws
the error per stage of a localized failure.
"""
