"""``trainctl``: the platform's command line for people (plan, train, submit, sweep, ...)."""
