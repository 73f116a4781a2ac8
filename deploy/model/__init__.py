"""The embedded model's recipe: task mix, tokenizer, training, ONNX export and the shipped artifacts.

``deploy.model.recipe`` re-creates ``deploy/model/artifacts/turnout-tiny/`` deterministically
(``turnout model build``); ``deploy.model.artifacts`` locates the shipped folders for serving
without importing torch.
"""
