"""The Textual console: the app, the frozen run view folded from the supervisor's messages,
its panels (``widgets``) and modal screens (``screens``). Never imports torch.
"""
