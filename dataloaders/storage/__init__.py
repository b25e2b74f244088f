"""The one storage layer every loader family reads remote data through (see
docs/remote-data.md): URLs (`urls`), the clients each library would make (`clients`), object
reads with a cache keyed by ETag and size (`objects`), ranged token arrays (`arrays`), and the
faults as one line (`faults`)."""

from dataloaders.storage.faults import StorageError as StorageError
from dataloaders.storage.objects import ObjectInfo as ObjectInfo
from dataloaders.storage.objects import cached_copy as cached_copy
from dataloaders.storage.objects import fetched as fetched
from dataloaders.storage.objects import head as head
from dataloaders.storage.objects import list_objects as list_objects
from dataloaders.storage.objects import read_all as read_all
from dataloaders.storage.objects import read_range as read_range
from dataloaders.storage.objects import upload as upload
from dataloaders.storage.urls import is_remote as is_remote
from dataloaders.storage.urls import shown as shown
