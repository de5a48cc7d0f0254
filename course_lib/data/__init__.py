"""Offline data sets for the course, deterministic under a seed, with DataLoader-ready collates.

* :mod:`.vocab` - ``Vocab`` (``[PAD]`` = 0) and collate functions that pad and return lengths;
* :mod:`.dates` - human-readable dates -> ISO dates (translation with reordering);
* :mod:`.toy` - copy / reverse / sort sequence tasks;
* :mod:`.scenes` - coloured shapes with captions and boxes (captioning, image-text matching);
* :mod:`.digits` - scikit-learn's 8x8 digits as image tensors;
* :mod:`.corpus` - a generated English corpus (LM, BERT) and a parallel pseudo-language corpus;
* :mod:`.loaders` - tiny-shakespeare, MNIST and CIFAR-10 from a local path or a URL.
"""

from .corpus import (
    NSPDataset,
    ParallelDataset,
    ParallelExample,
    TokenBlockDataset,
    corpus_vocab,
    generate_corpus,
    generate_documents,
    generate_parallel,
    generate_parallel_examples,
    mask_for_mlm,
    nsp_pairs,
    pseudo_vocab,
)
from .dates import (
    DATE_FORMATS,
    DATE_ORDERS,
    TWO_DIGIT_YEAR_FORMATS,
    DateDataset,
    DateExample,
    date_source_vocab,
    date_target_vocab,
    format_date,
    generate_date_examples,
    generate_dates,
)
from .digits import DigitsDataset, digits_loaders, load_digits_tensors, stratified_split
from .loaders import (
    CIFAR10_CLASSES,
    CIFAR10_URL,
    MNIST_URL,
    TINY_SHAKESPEARE_URL,
    fetch,
    load_cifar10,
    load_mnist,
    load_tiny_shakespeare,
    read_idx,
)
from .scenes import (
    COLOURS,
    SHAPES,
    MatchingDataset,
    Scene,
    SceneDataset,
    SceneObject,
    caption_is_true,
    generate_scene,
    generate_scenes,
    mismatched_caption,
    relation,
    relation_holds,
    scene_collate,
    scene_vocab,
)
from .toy import TOY_TASKS, ToyDataset, generate_toy, toy_target, toy_vocab
from .vocab import (
    BERT_SPECIALS,
    DEFAULT_SPECIALS,
    Vocab,
    make_collate,
    make_seq2seq_collate,
    pad_collate,
    pad_sequences,
    seq2seq_collate,
)

__all__ = [
    "BERT_SPECIALS", "CIFAR10_CLASSES", "CIFAR10_URL", "COLOURS", "DATE_FORMATS", "DATE_ORDERS",
    "DEFAULT_SPECIALS", "MNIST_URL", "SHAPES", "TINY_SHAKESPEARE_URL", "TOY_TASKS",
    "TWO_DIGIT_YEAR_FORMATS", "DateDataset", "DateExample", "DigitsDataset", "MatchingDataset",
    "NSPDataset", "ParallelDataset", "ParallelExample", "Scene", "SceneDataset", "SceneObject",
    "TokenBlockDataset", "ToyDataset", "Vocab", "caption_is_true", "corpus_vocab",
    "date_source_vocab", "date_target_vocab", "digits_loaders", "fetch", "format_date",
    "generate_corpus", "generate_date_examples", "generate_dates", "generate_documents",
    "generate_parallel", "generate_parallel_examples", "generate_scene", "generate_scenes",
    "generate_toy", "load_cifar10", "load_digits_tensors", "load_mnist", "load_tiny_shakespeare",
    "make_collate", "make_seq2seq_collate", "mask_for_mlm", "mismatched_caption", "nsp_pairs",
    "pad_collate", "pad_sequences", "pseudo_vocab", "read_idx", "relation", "relation_holds",
    "scene_collate", "scene_vocab", "seq2seq_collate", "stratified_split", "toy_target",
    "toy_vocab",
]  # fmt: skip
