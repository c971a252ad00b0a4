#!/usr/bin/env python3
"""Export real models to ONNX (random weights, batch 1, opset 17) outside the repo.

Models go to $STOW_MODELS_DIR (default ~/.cache/stowage/models). Weights are
random: nothing is downloaded. Needs torch, torchvision, transformers and onnx:

    python3 -m venv ~/.venvs/stow-export
    ~/.venvs/stow-export/bin/pip install torch torchvision transformers onnx
    ~/.venvs/stow-export/bin/python tools/export_models.py [--only resnet50,bert_base] [--force]
"""
import argparse
import os
import time


def torchvision_model(name, size=224, **kwargs):
    def build():
        import torchvision
        model = getattr(torchvision.models, name)(weights=None, **kwargs)
        return model, (f"image", (1, 3, size, size))
    return build


def deeplab():
    import torch
    import torchvision

    class OutOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
                weights=None, weights_backbone=None, aux_loss=False)

        def forward(self, x):
            return self.inner(x)["out"]

    return OutOnly(), ("image", (1, 3, 224, 224))


def bert_base():
    import torch
    from transformers import BertConfig, BertModel

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(BertConfig())

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Encoder(), None


MODELS = {
    "resnet50": torchvision_model("resnet50"),
    "mobilenet_v2": torchvision_model("mobilenet_v2"),
    "densenet121": torchvision_model("densenet121"),
    "efficientnet_b0": torchvision_model("efficientnet_b0"),
    "inception_v3": torchvision_model("inception_v3", size=299, aux_logits=False, init_weights=True),
    "shufflenet_v2_x1_0": torchvision_model("shufflenet_v2_x1_0"),
    "mnasnet1_0": torchvision_model("mnasnet1_0"),
    "mobilenet_v3_small": torchvision_model("mobilenet_v3_small"),
    "deeplabv3_mobilenet_v3_large": deeplab,
    "bert_base": bert_base,
}


def export(name, out_dir):
    import torch
    torch.manual_seed(0)
    model, image = MODELS[name]()
    model.eval()
    path = os.path.join(out_dir, f"{name}.onnx")
    if image is not None:
        input_name, shape = image
        args = (torch.randn(*shape),)
        names = [input_name]
    else:
        args = (torch.randint(0, 30000, (1, 128), dtype=torch.int64), torch.ones(1, 128, dtype=torch.int64))
        names = ["input_ids", "attention_mask"]
    with torch.no_grad():
        torch.onnx.export(model, args, path, opset_version=17, dynamo=False,
                          input_names=names, output_names=["output"])
    import onnx
    onnx.checker.check_model(path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = os.environ.get("STOW_MODELS_DIR", os.path.expanduser("~/.cache/stowage/models"))
    parser.add_argument("--out", default=default_dir, help=f"output directory (default {default_dir})")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--force", action="store_true", help="re-export models that exist")
    args = parser.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return
    names = args.only.split(",") if args.only else list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s): {', '.join(unknown)}; see --list")
    os.makedirs(args.out, exist_ok=True)
    for name in names:
        path = os.path.join(args.out, f"{name}.onnx")
        if os.path.exists(path) and not args.force:
            print(f"{path}: exists ({os.path.getsize(path):,} bytes)")
            continue
        started = time.time()
        export(name, args.out)
        print(f"{path}: {os.path.getsize(path):,} bytes, exported in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    main()
