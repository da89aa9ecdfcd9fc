foo.bar this wrong

foo.bar 42 42
foo.bar 4.2 4.2

blah 4.2 4.2
blah 42 42
