"""``wrap`` and ``unwrap``: what each selected entry becomes (its definition, mounts,
network, whether it could run at all), the files written and put back, and the records and
backups that make putting back possible."""
