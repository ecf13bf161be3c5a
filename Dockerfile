# One image for every service of compose.yaml: coordinators, migrate, seed, bucket and the
# workers. compose.yaml builds it once, as chunkwise:local.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /srv/chunkwise

# The versions CI tested (requirements.lock), not whatever setup.cfg's open ranges find today.
# The dependencies get a layer of their own, so editing the code reinstalls only the project
# (seconds) rather than downloading every dependency again: setup.cfg's install_requires and
# the fast extra (the worker's compiled CSV engine, the coordinator's numpy split) first.
COPY setup.cfg requirements.lock ./
RUN python -c 'import configparser; c = configparser.ConfigParser(); c.read("setup.cfg"); \
      print(c["options"]["install_requires"], c["options.extras_require"]["fast"])' \
      > /tmp/requires.txt \
    && pip install -c requirements.lock -r /tmp/requires.txt && rm /tmp/requires.txt
COPY pyproject.toml README.md ./
COPY app app
COPY services services
COPY repositories repositories
COPY worker_cli worker_cli
COPY sql sql
COPY gunicorn.conf.py ./
# Finds every dependency installed above; one missing there is still installed here.
RUN pip install -c requirements.lock '.[fast]' && useradd --system --uid 10001 chunkwise \
    && mkdir -p /var/lib/chunkwise/archive /var/lib/chunkwise/tmp /var/lib/chunkwise/prometheus \
    && chown -R chunkwise /var/lib/chunkwise

# MALLOC_ARENA_MAX: glibc gives each thread that allocates a heap of its own, each keeping its
# own free pages: a gunicorn process (32 threads) grew by 30-42 MiB over 16 drains of 8,000
# tasks, still rising; with two heaps it levelled off within 20 MiB (docs/performance.md).
ENV CHUNKWISE_ARCHIVE_DIR=/var/lib/chunkwise/archive \
    CHUNKWISE_TEMP_DIR=/var/lib/chunkwise/tmp \
    CHUNKWISE_MIGRATIONS_DIR=/srv/chunkwise/sql \
    PROMETHEUS_MULTIPROC_DIR=/var/lib/chunkwise/prometheus \
    CHUNKWISE_BIND=0.0.0.0:8000 \
    MALLOC_ARENA_MAX=2
USER chunkwise
EXPOSE 8000
CMD ["gunicorn", "-c", "/srv/chunkwise/gunicorn.conf.py"]
