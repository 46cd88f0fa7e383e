"""Settings for the API benchmark's server only: the test settings plus a URLconf that adds
the bare-``SELECT`` baseline views (``bench.api_urls``). Never used outside ``bench``."""

from config.settings.test import *  # noqa: F403

ROOT_URLCONF = "bench.api_urls"
