def unwritable_archive(bench):
    raise NotImplementedError
