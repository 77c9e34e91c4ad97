"""Inner problems: the tasks a learned optimizer is meta-trained on."""

from ._augment import (
    ParameterScaleAugmentation as ParameterScaleAugmentation,
    ScaledTask as ScaledTask,
)
from ._base import AbstractTask as AbstractTask
from ._cnn import ConvImageTask as ConvImageTask
from ._data import (
    ImageDataset as ImageDataset,
    ImageSplit as ImageSplit,
    load_image_dataset as load_image_dataset,
    MissingDataError as MissingDataError,
)
from ._fingerprint import task_fingerprint as task_fingerprint, task_label as task_label
from ._from_datasets import dataset_splits as dataset_splits, image_dataset as image_dataset
from ._image_mlp import ImageMLPTask as ImageMLPTask
from ._model_task import ModelTask as ModelTask
from ._quadratic import QuadraticTask as QuadraticTask
from ._registry import get_task as get_task, list_tasks as list_tasks
from ._text import (
    known_text_datasets as known_text_datasets,
    load_text_dataset as load_text_dataset,
    TextDataset as TextDataset,
)
from ._transformer import (
    ByteTransformer as ByteTransformer,
    TextTransformerTask as TextTransformerTask,
)
