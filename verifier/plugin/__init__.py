"""Models under test: the contract a model meets (`interface`), where models come from
(`registry`), the checked calls the properties make (`contract`), and the built-in adapters
(`adapters`; llama2.c's C program in `llama2c`)."""
