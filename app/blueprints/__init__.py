"""One blueprint per resource; views parse, call one service function, dump."""
