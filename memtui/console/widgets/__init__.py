"""The console's panels: memory, hardware, numerics, directives, events and the header, each
rendering the run view it is given.
"""
