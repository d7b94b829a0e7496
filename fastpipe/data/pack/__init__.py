"""Packs: a dataset stored once in fastpipe's memory-mappable, checksummed format, for ``data=mmap``
and ``python -m fastpipe.pack``.

- ``format.py``: the byte layout (its one description) and the header's fields;
- ``reader.py``: ``PackReader``, opening and verifying a pack file; ``writer.py``: ``PackWriter``,
  writing one sample at a time (records packs);
- ``build.py``: building an images pack (raw or JPEG), resumable, one builder at a time, with
  ``job.py`` (what is packed), ``pool.py`` (the processes that decode and encode), ``parts.py``
  (the files being written) and ``journal.py`` (what a killed builder leaves to resume, the lock);
- ``records.py``: records packs, any dataset of fixed-shape samples; ``jpeg.py``: the JPEG codec;
- ``shards.py``: sharded packs and their index; ``lanes.py``: which samples each rank reads;
- ``cache.py``: a dataset packed once into fastpipe's cache; ``resolve.py``: data=mmap's pack
  (data.path or the cache) checked against the dataset; ``source.py``: an images pack as batches;
  ``workers.py``: a JPEG pack's batches decoded in worker processes.

Nothing is imported here: each module is imported where it is used.
"""
