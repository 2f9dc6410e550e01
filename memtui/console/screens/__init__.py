"""The console's modal screens: confirmations, forms (chaos, directives, clamps) and the
detail and help views pushed over the main screen.
"""
