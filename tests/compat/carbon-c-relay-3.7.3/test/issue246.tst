sin.foobar.sin_1a_host000.foo
sin.foobar.sin_1a_host050.foo
sin.foobar.sin_1a_host100.foo
