"""BERT in miniature: pre-train (masked LM + next sentence) on the course corpus, then fine-tune.

1. Pre-training on ``course_lib.data.corpus.NSPDataset`` sentence pairs with BERT's two objectives:
   15% of the tokens masked with the 80/10/10 rule (``course_lib.masking.mask_tokens``) and
   next-sentence prediction. Reported: held-out MLM loss and accuracy on the masked tokens, and
   NSP accuracy, before and after.
2. Fine-tuning on a grammaticality task in the spirit of CoLA: is the subject-verb agreement of a
   sentence right ("the dogs see a cat") or broken ("the dogs sees a cat")? A few hundred labelled
   sentences; the same classifier is trained once from the pre-trained encoder and once from
   scratch, with the same steps, and evaluated on 1000 held-out sentences (chance 50%).

    .venv/bin/python benchmarks/bert_demo.py [--pretrain-steps 1500]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from course_lib.data.corpus import INTRANSITIVE, TRANSITIVE, NSPDataset, generate_corpus
from course_lib.data.vocab import pad_sequences
from course_lib.gpu import seed_everything
from course_lib.masking import mask_tokens
from course_lib.models.bert import BertConfig, BertForPreTraining, BertForSequenceClassification
from course_lib.train import fit

# verb form -> the form with the other number ("sees" <-> "see", "is" <-> "are")
_NUMBER_FLIP = {"is": "are", "are": "is"}
for singular, (plural, *_) in {**TRANSITIVE, **INTRANSITIVE}.items():
    _NUMBER_FLIP[singular], _NUMBER_FLIP[plural] = plural, singular


def break_agreement(sentence: str) -> str | None:
    """The sentence with its verb in the wrong number, or None if it has no verb."""
    words = sentence.split()
    for i, word in enumerate(words):
        if word in _NUMBER_FLIP:
            return " ".join([*words[:i], _NUMBER_FLIP[word], *words[i + 1 :]])
    return None


def grammaticality_set(n: int, seed: int, vocab) -> TensorDataset:
    """``n`` sentences ``[CLS] words [SEP]``, half with broken agreement (label 0)."""
    rng = random.Random(seed)
    ids, labels = [], []
    for sentence in generate_corpus(2 * n, seed):
        broken = break_agreement(sentence)
        if broken is None:
            continue
        label = int(rng.random() < 0.5)
        text = sentence if label else broken
        ids.append(torch.tensor([vocab.cls_id, *vocab.encode(text.split()), vocab.sep_id]))
        labels.append(label)
        if len(ids) == n:
            break
    padded, _ = pad_sequences(ids, pad_id=vocab.pad_id)
    return TensorDataset(padded, torch.tensor(labels))


def mlm_nsp_loss(model: nn.Module, batch: dict[str, Tensor], *, vocab, generator) -> Tensor:
    inputs, labels = mask_tokens(
        batch["input_ids"], vocab_size=len(vocab), mask_id=vocab.mask_id,
        special_ids=vocab.special_ids, generator=generator,
    )  # fmt: skip
    mlm_logits, nsp_logits = model(
        inputs, token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
    )
    mlm = F.cross_entropy(mlm_logits.flatten(0, 1), labels.flatten())
    return mlm + F.cross_entropy(nsp_logits, batch["is_next"])


@torch.no_grad()
def evaluate_pretraining(model: nn.Module, batches: list, vocab) -> dict[str, float]:
    model.eval()
    g = torch.Generator().manual_seed(123)  # the same masks every time
    mlm_loss = mlm_hits = mlm_n = nsp_hits = nsp_n = 0.0
    for batch in batches:
        inputs, labels = mask_tokens(
            batch["input_ids"], vocab_size=len(vocab), mask_id=vocab.mask_id,
            special_ids=vocab.special_ids, generator=g,
        )  # fmt: skip
        mlm_logits, nsp_logits = model(
            inputs, token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
        )
        chosen = labels != -100
        mlm_loss += F.cross_entropy(mlm_logits[chosen], labels[chosen], reduction="sum").item()
        mlm_hits += (mlm_logits[chosen].argmax(-1) == labels[chosen]).sum().item()
        mlm_n += chosen.sum().item()
        nsp_hits += (nsp_logits.argmax(-1) == batch["is_next"]).sum().item()
        nsp_n += len(nsp_logits)
    return {"mlm_loss": mlm_loss / mlm_n, "mlm_acc": mlm_hits / mlm_n, "nsp_acc": nsp_hits / nsp_n}


def classification_loss(model: nn.Module, batch: list[Tensor]) -> Tensor:
    ids, labels = batch
    return F.cross_entropy(model(ids, attention_mask=ids != 0), labels)


@torch.no_grad()
def classification_accuracy(model: nn.Module, data: TensorDataset) -> float:
    model.eval()
    ids, labels = data.tensors
    return (model(ids, attention_mask=ids != 0).argmax(-1) == labels).float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-steps", type=int, default=1500)
    parser.add_argument("--finetune-steps", type=int, default=300)
    parser.add_argument("--finetune-examples", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()

    train_pairs, test_pairs = NSPDataset(3000, seed=0), NSPDataset(200, seed=1)
    vocab = train_pairs.vocab
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=64, dropout=0.0,
    )  # fmt: skip
    test_batches = list(DataLoader(test_pairs, batch_size=256, collate_fn=test_pairs.collate))

    generator = seed_everything(0)
    model = BertForPreTraining(config=config)
    before = evaluate_pretraining(model, test_batches, vocab)
    loader = DataLoader(
        train_pairs, batch_size=64, shuffle=True, collate_fn=train_pairs.collate,
        generator=generator,
    )  # fmt: skip
    masks = torch.Generator().manual_seed(0)
    history = fit(
        model, loader, loss_fn=lambda m, b: mlm_nsp_loss(m, b, vocab=vocab, generator=masks),
        epochs=1000,
        max_steps=args.pretrain_steps, lr=1e-3, clip_grad=1.0, device="cpu", seed=0,
    )  # fmt: skip
    after = evaluate_pretraining(model, test_batches, vocab)
    pretrain_s = time.perf_counter() - start

    train_set = grammaticality_set(args.finetune_examples, seed=2, vocab=vocab)
    test_set = grammaticality_set(1000, seed=3, vocab=vocab)
    results = {}
    for name, pretrained in (("from scratch", None), ("from pre-trained BERT", model)):
        seed_everything(0)
        classifier = BertForSequenceClassification(config=config)
        if pretrained is not None:
            classifier.bert.load_state_dict(pretrained.bert.state_dict())
        fit(
            classifier,
            DataLoader(train_set, batch_size=32, shuffle=True, generator=seed_everything(0)),
            loss_fn=classification_loss, epochs=1000, max_steps=args.finetune_steps, lr=3e-4,
            clip_grad=1.0, device="cpu", seed=0,
        )  # fmt: skip
        results[name] = classification_accuracy(classifier, test_set)

    n = len(history.losses) // 20 or 1
    print(f"\nPre-training: {args.pretrain_steps} steps of batch 64 on {len(train_pairs)} pairs")
    print("| held-out metric          | before | after |")
    print("|--------------------------|-------:|------:|")
    print(f"| MLM loss (masked tokens) | {before['mlm_loss']:6.2f} | {after['mlm_loss']:5.2f} |")
    print(f"| MLM accuracy             | {before['mlm_acc']:6.1%} | {after['mlm_acc']:5.1%} |")
    print(f"| NSP accuracy             | {before['nsp_acc']:6.1%} | {after['nsp_acc']:5.1%} |")
    first, last = sum(history.losses[:n]) / n, sum(history.losses[-n:]) / n
    print(f"training loss (MLM + NSP): first {n} steps {first:.2f} -> last {n} steps {last:.2f}")
    print(
        f"\nFine-tuning: agreement judgement, {len(train_set)} labelled sentences, "
        f"{args.finetune_steps} steps; test on {len(test_set)} (chance 50%)"
    )
    print("| encoder                | test accuracy |")
    print("|------------------------|--------------:|")
    for name, acc in results.items():
        print(f"| {name:<22} | {acc:13.1%} |")
    total = time.perf_counter() - start
    print(f"\nwall time: pre-training {pretrain_s:.0f} s, total {total:.0f} s")


if __name__ == "__main__":
    main()
