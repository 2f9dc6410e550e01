"""``memtui serve``: the console in a browser, and the web server behind it."""
