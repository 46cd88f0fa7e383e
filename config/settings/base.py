"""Everything every environment shares, composed from the per-concern modules."""

from config.settings.api import *
from config.settings.core import *
from config.settings.database import *
from config.settings.logging import *
from config.settings.mail import *
from config.settings.operator import *
from config.settings.portal import *
from config.settings.queue import *
from config.settings.security import *
from config.settings.telemetry import *
from config.settings.webhooks import *
