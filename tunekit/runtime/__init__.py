"""The warm runtime (``tunekit up``): a long-lived local driver with Ray and warm workers, and the
thin client a search command becomes while one is up (``protocol``, ``client``, ``daemon``)."""
