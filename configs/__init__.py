"""Data shipped with dlrun: the catalog (prices, GPU specs, sources) and example job files."""
from pathlib import Path

CONFIGS_DIR = Path(__file__).resolve().parent
CATALOG_DIR = CONFIGS_DIR / "catalog"
EXAMPLES_DIR = CONFIGS_DIR / "examples"
