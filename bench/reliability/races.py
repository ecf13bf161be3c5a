def cancel_race(bench):
    raise NotImplementedError


def same_key_submits(bench):
    raise NotImplementedError


def admission_cap(bench):
    raise NotImplementedError
