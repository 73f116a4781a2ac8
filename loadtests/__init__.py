"""Load tests with locust (issue 7): locustfiles, headless runner, reports."""
