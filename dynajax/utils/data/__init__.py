"""``dynajax.utils.data``: datasets, samplers, ``DataLoader`` and ``default_collate``, as ``torch.utils.data``."""
from .dataloader import BatchSampler as BatchSampler
from .dataloader import DataLoader as DataLoader
from .dataloader import RandomSampler as RandomSampler
from .dataloader import Sampler as Sampler
from .dataloader import SequentialSampler as SequentialSampler
from .dataloader import SubsetRandomSampler as SubsetRandomSampler
from .dataloader import WeightedRandomSampler as WeightedRandomSampler
from .dataloader import default_collate as default_collate
from .dataloader import default_convert as default_convert
from .dataset import ConcatDataset as ConcatDataset
from .dataset import Dataset as Dataset
from .dataset import IterableDataset as IterableDataset
from .dataset import Subset as Subset
from .dataset import TensorDataset as TensorDataset
from .dataset import random_split as random_split
from .bucketing import BucketBatchSampler as BucketBatchSampler
from .bucketing import pad_sequence as pad_sequence
