"""diffusers on `neuron`: a tiny UNet2D and a tiny DDIM pipeline with random weights,
saved locally and loaded with `from_pretrained`, against the same on the CPU."""
import os

import numpy as np
import pytest
import torch

from helpers import no_fallback

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from diffusers import DDIMPipeline, DDIMScheduler, UNet2DModel  # noqa: E402


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """A DDIM pipeline around a 16x16 UNet2D: two resolutions, the lower one with
    self-attention, GroupNorm, SiLU, timestep embedding, skip connections."""
    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(16, 32), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=8,
                       attention_head_dim=8)
    path = tmp_path_factory.mktemp("ddim")
    DDIMPipeline(unet=unet, scheduler=DDIMScheduler(num_train_timesteps=100)).save_pretrained(path)
    return path


def test_unet2d_from_pretrained_on_neuron_equals_cpu(pipeline_dir):
    cpu = UNet2DModel.from_pretrained(pipeline_dir / "unet").eval()
    unet = UNet2DModel.from_pretrained(pipeline_dir / "unet").to("neuron").eval()
    sample = torch.randn(1, 3, 16, 16)
    timestep = torch.tensor(37)
    with torch.no_grad():
        expected = cpu(sample, timestep).sample
        with no_fallback():
            actual = unet(sample.to("neuron"), timestep.to("neuron")).sample
    assert actual.device.type == "neuron"
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_ddim_pipeline_on_neuron_equals_cpu(pipeline_dir):
    def generate(pipe):
        # The initial noise comes from a CPU generator, so both runs start alike.
        return pipe(batch_size=1, num_inference_steps=4, generator=torch.Generator().manual_seed(0),
                    output_type="np").images

    expected = generate(DDIMPipeline.from_pretrained(pipeline_dir))
    pipe = DDIMPipeline.from_pretrained(pipeline_dir).to("neuron")
    assert pipe.device.type == "neuron"
    pipe.set_progress_bar_config(disable=True)
    with no_fallback():
        images = generate(pipe)
    assert images.shape == (1, 16, 16, 3) and images.std() > 0.01
    np.testing.assert_allclose(images, expected, rtol=0, atol=1e-5)
