foo 4.2e-10 42
