"""A text corpus generated at run time from a small English grammar, and a parallel corpus.

No third-party text is shipped: sentences such as "a little fox sleeps in the barn ." come from a
grammar with structure a model can learn: determiner-noun and subject-verb agreement ("a cat sees",
"two cats see"), "a"/"an" before vowels, English adjective order (size before age before colour),
and verbs that select their objects (animals chase animals, they carry objects). Documents follow
one protagonist ("the fox ... it ..."), so BERT's next-sentence prediction (Devlin et al. 2019) is
learnable, and :func:`mask_for_mlm` implements BERT's 80/10/10 masking.

The parallel corpus renders the same sentences in a rule-based pseudo-language with a different
word order, for translation with attention (Bahdanau et al. 2015; Vaswani et al. 2017): subject -
place - object - verb, no "the", adjectives after the noun, and suffixes for plural (``-n``), case
(subject ``-ka``, object ``-po``), place (in ``-la``, near ``-ve``, behind ``-su``) and verb
number (``-a`` / ``-an``). "the big cat sees two red balls in the garden ." becomes
"mako-ka gran gardi-la du bolo-n-po ruga vid-a .".

Shape legend: ``B`` batch, ``T`` tokens.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.data import Dataset

from course_lib.masking import mask_tokens

from .vocab import BERT_SPECIALS, DEFAULT_SPECIALS, Vocab, pad_sequences, seq2seq_collate

# English singular -> (plural, pseudo-language stem)
ANIMALS = {
    "cat": ("cats", "mako"), "dog": ("dogs", "tuvi"), "bird": ("birds", "pilo"),
    "fox": ("foxes", "reka"), "horse": ("horses", "hasu"), "mouse": ("mice", "nimi"),
    "owl": ("owls", "ulu"), "rabbit": ("rabbits", "lapi"), "wolf": ("wolves", "vargo"),
    "elephant": ("elephants", "olifa"),
}  # fmt: skip
OBJECTS = {
    "ball": ("balls", "bolo"), "box": ("boxes", "kasi"), "book": ("books", "libu"),
    "cup": ("cups", "tasa"), "apple": ("apples", "apu"), "hat": ("hats", "kapo"),
    "stone": ("stones", "peto"), "key": ("keys", "kiva"),
}  # fmt: skip
PLACES = {
    "garden": "gardi", "house": "domu", "park": "parko", "river": "fluvi", "forest": "silva",
    "kitchen": "kuko", "field": "agro", "barn": "stalo",
}  # fmt: skip
# adjective -> (order rank: opinion 0 < size 1 < age 2 < colour 3, stem)
ADJECTIVES = {
    "happy": (0, "fel"), "angry": (0, "ira"), "heavy": (0, "peza"), "big": (1, "gran"),
    "small": (1, "mik"), "little": (1, "pik"), "old": (2, "vet"), "young": (2, "jun"),
    "brown": (3, "bruna"), "red": (3, "ruga"), "green": (3, "verda"), "blue": (3, "blua"),
    "orange": (3, "oranja"),
}  # fmt: skip
ANIMAL_ADJECTIVES = ("happy", "angry", "big", "small", "little", "old", "young", "brown")
OBJECT_ADJECTIVES = ("heavy", "big", "small", "old", "red", "green", "blue", "orange")
# verb (3rd person singular) -> (plural, what it takes as object, stem)
TRANSITIVE = {
    "sees": ("see", "any", "vid"), "watches": ("watch", "any", "rig"),
    "likes": ("like", "any", "am"), "chases": ("chase", "animal", "kas"),
    "follows": ("follow", "animal", "sekv"), "finds": ("find", "object", "trov"),
    "carries": ("carry", "object", "port"), "wants": ("want", "object", "vol"),
}  # fmt: skip
INTRANSITIVE = {
    "sleeps": ("sleep", "dorm"), "runs": ("run", "kur"), "sits": ("sit", "sid"),
    "plays": ("play", "lud"), "waits": ("wait", "atend"),
}  # fmt: skip
PREPOSITIONS = {"in": "-la", "near": "-ve", "behind": "-su"}
DETERMINERS = {"a": "un", "an": "un", "some": "kelk", "two": "du", "three": "tri"}  # "the" -> none
CASES = {"subject": "-ka", "object": "-po"}


def _translation_lexicon() -> dict[str, str]:
    lexicon = {"it": "ti", "they": "ti", "is": "es", "are": "es", ".": "."}
    for table in (ANIMALS, OBJECTS):
        for singular, (plural, stem) in table.items():
            lexicon[singular] = lexicon[plural] = stem
    lexicon.update(PLACES)
    lexicon.update({adjective: stem for adjective, (_, stem) in ADJECTIVES.items()})
    for singular, (plural, _, stem) in TRANSITIVE.items():
        lexicon[singular] = lexicon[plural] = stem
    for singular, (plural, stem) in INTRANSITIVE.items():
        lexicon[singular] = lexicon[plural] = stem
    lexicon.update(DETERMINERS)
    return lexicon


#: English word -> pseudo-language stem (the word's translation before suffixes); "the" has none.
TRANSLATION_LEXICON: dict[str, str] = _translation_lexicon()


@dataclass(frozen=True)
class _NP:
    noun: str  # singular lemma, or "it" for a pronoun
    plural: bool
    det: str = "the"  # the, a, some, two, three (a -> an is decided when rendering)
    adjectives: tuple[str, ...] = ()
    pronoun: bool = False


@dataclass(frozen=True)
class _Clause:
    subject: _NP
    verb: str  # singular form ("sees"), or "is" for the copula
    obj: _NP | None = None
    complement: str | None = None  # adjective after "is"/"are"
    place: tuple[str, _NP] | None = None  # (preposition, place NP)


def _sample_np(rng: random.Random, kind: str, *, plural: bool | None = None) -> _NP:
    if kind == "place":
        return _NP(rng.choice(list(PLACES)), plural=False)
    nouns, adjectives = (
        (ANIMALS, ANIMAL_ADJECTIVES) if kind == "animal" else (OBJECTS, OBJECT_ADJECTIVES)
    )
    plural = rng.random() < 0.35 if plural is None else plural
    det = rng.choice(["the", "some", "two", "three"] if plural else ["the", "a"])
    n_adjectives = rng.choices([0, 1, 2], weights=[6, 3, 1])[0]
    chosen = rng.sample(adjectives, n_adjectives)
    if n_adjectives == 2 and ADJECTIVES[chosen[0]][0] == ADJECTIVES[chosen[1]][0]:
        chosen = chosen[:1]  # two adjectives of one kind ("big small") read badly
    chosen.sort(key=lambda a: ADJECTIVES[a][0])
    return _NP(rng.choice(list(nouns)), plural, det, tuple(chosen))


def _sample_clause(
    rng: random.Random, subject: _NP | None = None, place: str | None = None
) -> _Clause:
    subject = subject or _sample_np(rng, "animal")
    where = None
    kind = rng.choices(["transitive", "intransitive", "copula"], weights=[5, 3, 2])[0]
    if rng.random() < (0.6 if kind == "intransitive" else 0.35):
        noun = place if place and rng.random() < 0.7 else rng.choice(list(PLACES))
        where = (rng.choice(list(PREPOSITIONS)), _NP(noun, plural=False))
    if kind == "transitive":
        verb = rng.choice(list(TRANSITIVE))
        takes = TRANSITIVE[verb][1]
        obj_kind = rng.choice(["animal", "object"]) if takes == "any" else takes
        return _Clause(subject, verb, obj=_sample_np(rng, obj_kind), place=where)
    if kind == "intransitive":
        return _Clause(subject, rng.choice(list(INTRANSITIVE)), place=where)
    complements = [
        a for a in ANIMAL_ADJECTIVES if a not in subject.adjectives
    ]  # no "brown dog is brown"
    return _Clause(subject, "is", complement=rng.choice(complements), place=where)


# Each token is rendered with a "slot" naming its role; tokens of the two languages that share a
# slot are aligned.
Slotted = list[tuple[str, tuple]]


def _english_np(np_: _NP, role: str) -> Slotted:
    if np_.pronoun:
        return [("they" if np_.plural else "it", (role, "noun"))]
    noun = ANIMALS.get(np_.noun, OBJECTS.get(np_.noun, (np_.noun,)))[0] if np_.plural else np_.noun
    words = [*np_.adjectives, noun]
    det = "an" if np_.det == "a" and words[0][0] in "aeiou" else np_.det
    return [
        (det, (role, "det")),
        *((a, (role, "adj", a)) for a in np_.adjectives),
        (noun, (role, "noun")),
    ]


def _english(clause: _Clause) -> Slotted:
    subject = clause.subject
    if clause.verb == "is":
        verb = "are" if subject.plural else "is"
    elif clause.verb in TRANSITIVE:
        verb = TRANSITIVE[clause.verb][0] if subject.plural else clause.verb
    else:
        verb = INTRANSITIVE[clause.verb][0] if subject.plural else clause.verb
    out = [*_english_np(subject, "S"), (verb, ("V",))]
    if clause.complement:
        out.append((clause.complement, ("C",)))
    if clause.obj:
        out += _english_np(clause.obj, "O")
    if clause.place:
        out += [(clause.place[0], ("P", "noun")), *_english_np(clause.place[1], "P")]
    return [*out, (".", (".",))]


def _pseudo_np(np_: _NP, role: str, suffix: str) -> Slotted:
    stem = TRANSLATION_LEXICON["it" if np_.pronoun else np_.noun]
    det = [] if np_.det == "the" or np_.pronoun else [(DETERMINERS[np_.det], (role, "det"))]
    noun = stem + ("-n" if np_.plural else "") + suffix
    adjectives = [(ADJECTIVES[a][1], (role, "adj", a)) for a in np_.adjectives]
    return [*det, (noun, (role, "noun")), *adjectives]


def _pseudo(clause: _Clause) -> Slotted:
    out = _pseudo_np(clause.subject, "S", CASES["subject"])
    if clause.place:
        out += _pseudo_np(clause.place[1], "P", PREPOSITIONS[clause.place[0]])
    if clause.obj:
        out += _pseudo_np(clause.obj, "O", CASES["object"])
    if clause.complement:
        out.append((ADJECTIVES[clause.complement][1], ("C",)))
    stem = TRANSLATION_LEXICON[clause.verb]
    return [*out, (stem + ("-an" if clause.subject.plural else "-a"), ("V",)), (".", (".",))]


def _document(rng: random.Random, n_sentences: int) -> list[str]:
    hero = _sample_np(rng, "animal")
    hero = _NP(hero.noun, hero.plural, rng.choice(["some", "two"] if hero.plural else ["a"]),
               hero.adjectives)  # fmt: skip
    home = rng.choice(list(PLACES))
    sentences = []
    for i in range(n_sentences):
        if i == 0:
            subject = hero
        elif rng.random() < 0.5:
            subject = _NP(hero.noun, hero.plural, pronoun=True)
        else:
            subject = _NP(hero.noun, hero.plural, "the")
        sentences.append(" ".join(w for w, _ in _english(_sample_clause(rng, subject, home))))
    return sentences


def _check_count(name: str, value: int, minimum: int = 0) -> None:
    if not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def generate_documents(
    n_documents: int, seed: int, *, min_sentences: int = 3, max_sentences: int = 6
) -> list[list[str]]:
    """``n_documents`` short stories about one animal each: lists of sentences (words and a final
    " ." separated by spaces)."""
    _check_count("n_documents", n_documents)
    if not 1 <= min_sentences <= max_sentences:
        raise ValueError(f"need 1 <= min_sentences <= max_sentences, got {min_sentences}, "
                         f"{max_sentences}")  # fmt: skip
    rng = random.Random(seed)
    return [_document(rng, rng.randint(min_sentences, max_sentences)) for _ in range(n_documents)]


def generate_corpus(n_sentences: int, seed: int) -> list[str]:
    """``n_sentences`` sentences for language modelling: consecutive documents, flattened."""
    _check_count("n_sentences", n_sentences)
    rng = random.Random(seed)
    sentences: list[str] = []
    while len(sentences) < n_sentences:
        sentences += _document(rng, rng.randint(3, 6))
    return sentences[:n_sentences]


def corpus_vocab(*, bert: bool = False) -> Vocab:
    """Every word the grammar can produce (sorted), after the special tokens (``BERT_SPECIALS``
    with ``bert=True``)."""
    words = {"the", "it", "they", "is", "are", ".", *PREPOSITIONS, *DETERMINERS, *ADJECTIVES}
    for table in (ANIMALS, OBJECTS):
        words.update(table)
        words.update(plural for plural, _ in table.values())
    words.update(PLACES)
    for table in (TRANSITIVE, INTRANSITIVE):
        words.update(table)
        words.update(forms[0] for forms in table.values())
    return Vocab(sorted(words), specials=BERT_SPECIALS if bert else DEFAULT_SPECIALS)


def nsp_pairs(
    documents: Sequence[Sequence[str]], seed: int, *, negative_fraction: float = 0.5
) -> list[tuple[str, str, bool]]:
    """``(sentence a, sentence b, is_next)`` for every consecutive pair in every document; with
    probability ``negative_fraction`` b is replaced by a sentence of another document."""
    if len(documents) < 2:
        raise ValueError("nsp_pairs needs at least two documents to draw random sentences from")
    rng = random.Random(seed)
    pairs = []
    for d, document in enumerate(documents):
        for a, b in zip(document, document[1:]):
            if rng.random() < negative_fraction:
                other = rng.choice([k for k in range(len(documents)) if k != d])
                pairs.append((a, rng.choice(documents[other]), False))
            else:
                pairs.append((a, b, True))
    return pairs


class NSPDataset(Dataset):
    """BERT sentence pairs: ``input_ids = [CLS] a [SEP] b [SEP]``, ``token_type_ids`` (0 for a, 1
    for b), ``is_next``. Apply :func:`mask_for_mlm` to a collated batch for the MLM objective."""

    def __init__(self, n_documents: int, seed: int, *, negative_fraction: float = 0.5):
        self.vocab = corpus_vocab(bert=True)
        documents = generate_documents(n_documents, seed)
        self.pairs = nsp_pairs(documents, seed, negative_fraction=negative_fraction)

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        a, b, is_next = self.pairs[index]
        v = self.vocab
        ids_a, ids_b = v.encode(a.split()), v.encode(b.split())
        return {
            "input_ids": torch.tensor([v.cls_id, *ids_a, v.sep_id, *ids_b, v.sep_id]),
            "token_type_ids": torch.tensor([0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)),
            "is_next": torch.tensor(int(is_next)),
        }

    @staticmethod
    def collate(batch: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """``input_ids (B, T)``, ``token_type_ids (B, T)``, ``attention_mask (B, T)`` bool (True
        for real tokens), ``lengths (B,)``, ``is_next (B,)``."""
        input_ids, lengths = pad_sequences([b["input_ids"] for b in batch], pad_id=0)
        token_type_ids, _ = pad_sequences([b["token_type_ids"] for b in batch], pad_id=0)
        T = input_ids.shape[1]
        return {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": torch.arange(T)[None, :] < lengths[:, None],  # (B, T)
            "lengths": lengths,
            "is_next": torch.stack([b["is_next"] for b in batch]),
        }


def mask_for_mlm(
    input_ids: Tensor,
    *,
    vocab: Vocab,
    mask_prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT's masked-language-model corruption of ``input_ids (B, T)`` in this corpus's vocabulary.

    A thin wrapper of :func:`course_lib.masking.mask_tokens`, the one implementation of the rule.

    Each non-special token is chosen with probability ``mask_prob``; a chosen token becomes
    ``[MASK]`` (80 %), a random non-special token (10 %) or stays (10 %). Returns
    ``(corrupted ids (B, T), labels (B, T))`` with labels = original id where chosen, -100 elsewhere
    (``cross_entropy``'s default ``ignore_index``).
    """
    if not 0.0 <= mask_prob <= 1.0:
        raise ValueError(f"mask_prob must be in [0, 1], got {mask_prob}")
    return mask_tokens(
        input_ids,
        vocab_size=len(vocab),
        mask_id=vocab.mask_id,
        special_ids=vocab.special_ids,
        prob=mask_prob,
        generator=generator,
    )


class TokenBlockDataset(Dataset):
    """Next-token prediction on a long id stream ``ids (N,)``: item ``i`` is ``(x (T,), y (T,))``
    with ``x = ids[s : s + T]``, ``y = ids[s + 1 : s + T + 1]``, ``s = i * stride``.

    ``ids = torch.tensor(vocab.encode(" ".join(sentences).split()))`` for words, or
    ``vocab.encode(text)`` with a character vocabulary.
    """

    def __init__(self, ids: Tensor | Sequence[int], block_size: int, *, stride: int | None = None):
        self.ids = torch.as_tensor(ids, dtype=torch.long)
        _check_count("block_size", block_size, 1)
        self.block_size, self.stride = block_size, stride or block_size
        _check_count("stride", self.stride, 1)
        if len(self.ids) < block_size + 1:
            raise ValueError(f"need more than block_size={block_size} ids, got {len(self.ids)}")

    def __len__(self) -> int:
        return (len(self.ids) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} blocks")
        s = index * self.stride
        return self.ids[s : s + self.block_size], self.ids[s + 1 : s + self.block_size + 1]


class ParallelExample(NamedTuple):
    source: str  # English
    target: str  # pseudo-language
    alignment: list[tuple[int, int]]  # (source word index, target word index)


def generate_parallel_examples(n: int, seed: int) -> list[ParallelExample]:
    """``n`` sentence pairs with word alignments (English "the" has no counterpart; a
    preposition aligns to the place noun that carries its suffix)."""
    _check_count("n", n)
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        clause = _sample_clause(rng)
        english, pseudo = _english(clause), _pseudo(clause)
        slots = {slot: j for j, (_, slot) in enumerate(pseudo)}
        alignment = [(i, slots[slot]) for i, (_, slot) in enumerate(english) if slot in slots]
        source, target = " ".join(w for w, _ in english), " ".join(w for w, _ in pseudo)
        examples.append(ParallelExample(source, target, alignment))
    return examples


def generate_parallel(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` pairs ``(English sentence, pseudo-language sentence)``; see the module docstring."""
    return [(e.source, e.target) for e in generate_parallel_examples(n, seed)]


def pseudo_vocab() -> Vocab:
    """Every word the pseudo-language can produce (sorted), after the default special tokens."""
    words = {".", "es-a", "es-an", *set(DETERMINERS.values()), *(s for _, s in ADJECTIVES.values())}
    nouns = [s for _, s in ANIMALS.values()] + [s for _, s in OBJECTS.values()] + ["ti"]
    for stem in nouns:
        for number in ("", "-n"):
            words.update(stem + number + case for case in CASES.values())
    words.update(stem + case for stem in PLACES.values() for case in PREPOSITIONS.values())
    verbs = [s for _, _, s in TRANSITIVE.values()] + [s for _, s in INTRANSITIVE.values()]
    words.update(stem + agreement for stem in verbs for agreement in ("-a", "-an"))
    return Vocab(sorted(words))


class ParallelDataset(Dataset):
    """English -> pseudo-language pairs as ``(src ids (T_src,), tgt ids (T_tgt,))`` with the target
    in ``[BOS] ... [EOS]``; ``collate`` gives the dict of ``seq2seq_collate``."""

    def __init__(self, n: int, seed: int):
        self.examples = generate_parallel_examples(n, seed)
        self.src_vocab, self.tgt_vocab = corpus_vocab(), pseudo_vocab()
        self._src = [torch.tensor(self.src_vocab.encode(e.source.split())) for e in self.examples]
        self._tgt = [
            torch.tensor(self.tgt_vocab.encode(e.target.split(), add_bos=True, add_eos=True))
            for e in self.examples
        ]

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self._src[index], self._tgt[index]

    def collate(self, batch: Sequence[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
        return seq2seq_collate(batch)
