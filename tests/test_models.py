"""Teacher/student models: shapes, the embedding contract, sizes, determinism and errors."""

import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from node import models
from node.errors import ConfigError
from node.models import ARCHITECTURES, build_model, parameter_count

# (in_channels, image_size): MNIST-shaped and CIFAR-shaped inputs
SHAPES = [(1, 28), (3, 32)]
# narrow widths keep the ResNets fast; the default widths are checked once below
SMALL_CHANNELS = {
    "cnn": (4, 8),
    "fedavg_cnn": (4, 8),
    "resnet8": (4, 8, 8),
    "resnet18": (4, 8, 8, 8),
    "resnet32": (4, 8, 8),
}


pytestmark = pytest.mark.usefixtures("one_thread")


def small(
    arch: str,
    in_channels: int = 1,
    image_size: int = 28,
    *,
    num_classes: int = 10,
    embedding_dim: int = 12,
    **kw,
) -> nn.Module:
    """build_model with narrow widths unless ``channels`` is given."""
    kw.setdefault("channels", SMALL_CHANNELS[arch])
    return build_model(
        arch,
        in_channels=in_channels,
        image_size=image_size,
        num_classes=num_classes,
        embedding_dim=embedding_dim,
        **kw,
    )


@pytest.mark.parametrize("in_channels,image_size", SHAPES)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_forward_shapes_and_embedding_contract(arch, in_channels, image_size):
    torch.manual_seed(0)
    model = small(arch, in_channels, image_size, num_classes=7, embedding_dim=12)
    seen = []
    model.classifier.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
    x = torch.randn(3, in_channels, image_size, image_size)
    logits, emb = model(x)
    assert logits.shape == (3, 7)
    assert emb.shape == (3, 12)
    assert (emb >= 0).all()
    # the embedding is exactly the classifier's input, and the logits are its output
    assert seen[0] is emb
    assert torch.equal(logits, model.classifier(emb))
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert linears == [model.embed, model.classifier]
    assert model.embed.out_features == 12 and model.classifier.in_features == 12


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_default_widths_build_and_run(arch):
    torch.manual_seed(0)
    model = build_model(
        arch,
        in_channels=1,
        image_size=28,
        num_classes=10,
        embedding_dim=models.DEFAULT_EMBEDDING_DIM,
    )
    logits, emb = model(torch.randn(2, 1, 28, 28))
    assert logits.shape == (2, 10) and emb.shape == (2, models.DEFAULT_EMBEDDING_DIM)


def test_default_cnn_widths_are_teacher_and_student_halves_them():
    assert models.STUDENT_CNN_CHANNELS == tuple(c // 2 for c in models.TEACHER_CNN_CHANNELS)
    model = build_model("cnn", in_channels=1, image_size=28, num_classes=10, embedding_dim=8)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert tuple(c.out_channels for c in convs) == models.TEACHER_CNN_CHANNELS


def test_teacher_and_student_share_embedding_size():
    teacher = small("resnet8", embedding_dim=16)
    student = small("cnn", embedding_dim=16)
    x = torch.randn(2, 1, 28, 28)
    assert teacher(x)[1].shape == student(x)[1].shape == (2, 16)


def test_cnn_parameter_counts_by_hand():
    k = models.CNN_KERNEL_SIZE
    teacher = small("cnn", channels=(8, 16), embedding_dim=32, num_classes=10)
    student = small("cnn", channels=(4, 8), embedding_dim=32, num_classes=10)
    # conv weights k*k*c_in*c_out plus biases; after two pools a 28x28 image is 7x7
    t_conv = (k * k * 1 * 8 + 8) + (k * k * 8 * 16 + 16)
    s_conv = (k * k * 1 * 4 + 4) + (k * k * 4 * 8 + 8)
    assert parameter_count(teacher.features) == t_conv
    assert parameter_count(student.features) == s_conv
    assert parameter_count(teacher) == t_conv + (16 * 49 * 32 + 32) + (32 * 10 + 10)
    assert parameter_count(student) == s_conv + (8 * 49 * 32 + 32) + (32 * 10 + 10)
    # halving both widths quarters the c1*c2 term, which dominates
    assert 0.25 <= s_conv / t_conv < 0.3


def test_fedavg_cnn_has_the_fedhp_papers_582026_parameters_on_mnist():
    # unpadded 5x5 convolutions: 28 -> 24 -> pool 12 -> 8 -> pool 4, so 64 x 4 x 4 = 1024
    # features; conv 1x32 (25 x 32 + 32 = 832), conv 32x64 (800 x 64 + 64 = 51,264), embed
    # 1024 x 512 + 512 = 524,800, classifier 512 x 10 + 10 = 5,130
    model = build_model("fedavg_cnn", in_channels=1, image_size=28, num_classes=10,
                        embedding_dim=512)
    assert parameter_count(model.features) == 832 + 51_264
    assert model.embed.in_features == 1024
    assert parameter_count(model) == 582_026
    with pytest.raises(ConfigError, match="image_size: fedavg_cnn needs at least 16 pixels"):
        build_model("fedavg_cnn", in_channels=1, image_size=12, num_classes=10,
                    embedding_dim=8)


@pytest.mark.parametrize("arch,convs3x3", [("resnet8", 7), ("resnet18", 17), ("resnet32", 31)])
def test_resnet_depth(arch, convs3x3):
    # 6n+2 / 18 weighted layers: the 3x3 convs plus the embed layer (classifier excluded)
    model = small(arch)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == convs3x3


def test_resnet_channels_override_stage_widths():
    model = small("resnet8", channels=(5, 6, 7))
    assert model.embed.in_features == 7
    widths = {m.num_features for m in model.modules() if isinstance(m, nn.BatchNorm2d)}
    assert widths == {5, 6, 7}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_same_seed_same_weights(arch):
    torch.manual_seed(3)
    a = small(arch).state_dict()
    torch.manual_seed(3)
    b = small(arch).state_dict()
    torch.manual_seed(4)
    c = small(arch).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["classifier.weight"], c["classifier.weight"])


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_state_dict_round_trip(arch):
    torch.manual_seed(0)
    model = small(arch)
    x = torch.randn(4, 1, 28, 28)
    model(x)  # a train-mode pass moves the BatchNorm running stats off their init
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    torch.manual_seed(1)
    fresh = small(arch)
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    model.eval()
    fresh.eval()
    with torch.no_grad():
        for got, want in zip(fresh(x), model(x), strict=True):
            assert torch.equal(got, want)


def test_parameter_count_counts_all_parameters():
    model = nn.Linear(3, 4)
    model.bias.requires_grad_(False)
    assert parameter_count(model) == 16


def test_unknown_arch_names_key():
    with pytest.raises(ConfigError, match=r"model\.teacher.*'vgg'"):
        build_model(
            "vgg",
            in_channels=1,
            image_size=28,
            num_classes=10,
            embedding_dim=8,
            key="model.teacher",
        )


@pytest.mark.parametrize(
    "arch,channels",
    [
        ("cnn", (4,)),
        ("cnn", (4, 8, 16)),
        ("resnet8", (4, 8)),
        ("resnet18", (4, 8, 16)),
        ("resnet32", (4, 8, 16, 32)),
    ],
)
def test_wrong_channels_length_names_key(arch, channels):
    with pytest.raises(ConfigError, match=r"model\.student_channels"):
        small(arch, channels=channels, key="model.student")


@pytest.mark.parametrize("channels", [(0, 8), (4, -1), (4.0, 8), (True, 8), "48", 4])
def test_bad_channel_values_name_key(channels):
    with pytest.raises(ConfigError, match=r"model\.teacher_channels"):
        small("cnn", channels=channels, key="model.teacher")


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("embedding_dim", 0, r"model\.embedding_dim"),
        ("num_classes", -2, "num_classes"),
        ("in_channels", 0, "in_channels"),
        ("image_size", 0, "image_size"),
        ("image_size", 3, "image_size"),
    ],
)
def test_bad_sizes_name_field(field, value, match):
    kw = {"in_channels": 1, "image_size": 28, "num_classes": 10, "embedding_dim": 8}
    kw[field] = value
    with pytest.raises(ConfigError, match=match):
        build_model("cnn", **kw)


def test_small_resnet_input_still_works():
    # stride-2 stages shrink 28 -> 14 -> 7 -> 4; even a tiny image keeps a 1x1 map
    model = small("resnet18", image_size=5)
    logits, emb = model(torch.randn(2, 1, 5, 5))
    assert logits.shape == (2, 10) and emb.shape == (2, 12)


def _reference_cnn(model, x):
    """The CNN as the paper draws it, in torch's plain NCHW ops: conv, ReLU, max-pool (x2),
    embed + ReLU, classifier."""
    import torch.nn.functional as F

    conv1, conv2 = model.features[0], model.features[3]
    h = F.max_pool2d(F.relu(conv1(x)), 2)
    h = F.max_pool2d(F.relu(conv2(h)), 2)
    embedding = F.relu(model.embed(h.flatten(1)))
    return model.classifier(embedding), embedding


@pytest.mark.parametrize("channels", [[4, 8], [8, 16], [16, 32]])  # the paper's student, teacher
@pytest.mark.parametrize("grad", [True, False])
def test_the_cnn_computes_exactly_conv_relu_pool_in_training_and_evaluation(grad, channels):
    torch.manual_seed(0)
    model = build_model("cnn", in_channels=1, image_size=28, num_classes=10, embedding_dim=32,
                        channels=channels)
    x = torch.randn(16, 1, 28, 28)
    x[:, :, :8] = 0.0  # flat regions: ties inside pooling windows
    with torch.set_grad_enabled(grad):
        logits, embedding = model(x)
        ref_logits, ref_embedding = _reference_cnn(model, x)
    assert torch.equal(logits, ref_logits) and torch.equal(embedding, ref_embedding)
    if grad:  # the gradients too, bit for bit
        target = torch.randint(0, 10, (16,))
        ours = torch.autograd.grad(nn.functional.cross_entropy(logits, target),
                                   list(model.parameters()))
        ref = torch.autograd.grad(nn.functional.cross_entropy(ref_logits, target),
                                  list(model.parameters()))
        assert all(torch.equal(a, b) for a, b in zip(ours, ref))


@pytest.mark.parametrize("shape", [(3, 4, 28, 28), (2, 3, 7, 9), (1, 2, 3, 5), (2, 1, 6, 3)])
def test_the_inference_pool_takes_max_pool2ds_maxima_on_any_size(shape):
    from node.models import CpuMaxPool2d
    torch.manual_seed(1)
    x = torch.randn(shape)
    x.view(-1)[::7] = 0.0  # ties
    x.view(-1)[3::11] = float("nan")  # max_pool2d lets a NaN through: so must the pool
    x.view(-1)[5::13] = float("-inf")
    with torch.no_grad():
        ours, theirs = CpuMaxPool2d(2)(x), F.max_pool2d(x, 2)
        # a window other than 2x2 takes the channels-last kernel: the same maxima too
        other, reference = CpuMaxPool2d(3, 1)(x), F.max_pool2d(x, 3, 1)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True)
    assert ours.is_contiguous()
    torch.testing.assert_close(other, reference, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("shape", [(1, 2, 1, 5), (2, 1, 6, 1)])
def test_the_inference_pool_refuses_an_image_too_small_as_max_pool2d_does(shape):
    from node.models import CpuMaxPool2d
    with torch.no_grad(), pytest.raises(RuntimeError, match="Output size is too small"):
        CpuMaxPool2d(2)(torch.zeros(shape))


@pytest.mark.parametrize("window", [(2, 2, 0), (3, 1, 1), (3, 2, 0)])
@pytest.mark.parametrize("shape", [(3, 8, 28, 28), (2, 3, 7, 9)])
def test_the_pool_with_gradients_gives_max_pool2ds_gradients_bit_for_bit(window, shape):
    from node.models import CpuMaxPool2d
    kernel, stride, padding = window
    torch.manual_seed(2)
    x = torch.randn(shape)
    x.view(-1)[::5] = 0.0  # ties: the gradient goes to the first maximum of a window
    x.view(-1)[7::97] = float("nan")  # and to its last NaN
    grad_out = None
    found = []
    for pool in (CpuMaxPool2d(kernel, stride, padding),
                 lambda t: F.max_pool2d(t, kernel, stride, padding)):
        leaf = x.clone().requires_grad_()
        out = pool(leaf)
        if grad_out is None:
            grad_out = torch.randn(out.shape)
            grad_out.view(-1)[::3] = -0.0
        out.backward(grad_out)
        found.append((out.detach(), leaf.grad))
    (ours, our_grad), (theirs, their_grad) = found
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(our_grad.view(torch.int32), their_grad.view(torch.int32))  # the bits


def test_the_pool_under_vmap_of_grad_takes_torchs_own_kernel():
    from torch.func import functional_call, grad, vmap

    from node.models import CpuMaxPool2d
    conv = nn.Conv2d(1, 4, 3, padding=1)
    stacked = {k: torch.stack([v.detach(), v.detach() + 0.1]) for k, v in conv.named_parameters()}
    x = torch.randn(2, 8, 1, 8, 8)

    def loss(pool):
        return lambda p, batch: pool(functional_call(conv, p, (batch,))).sum()
    ours = vmap(grad(loss(CpuMaxPool2d(2))))(stacked, x)
    theirs = vmap(grad(loss(lambda t: F.max_pool2d(t, 2))))(stacked, x)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
