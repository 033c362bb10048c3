import pytest

from salience.search import BM25

DOCS = [
    {"id": "cats", "title": "Cats at home", "text": "Cats sleep most of the day and hunt mice at night.", "year": 2001},
    {"id": "dogs", "title": "Dogs", "text": "Dogs bark at strangers; a dog guards the house.", "year": 2010},
    {"id": "fish", "title": "Fish tanks", "text": "Fish swim in clean water. Filters keep the tank clean.", "year": 2015},
    {"id": "birds", "title": "Birds", "text": "Birds sing at dawn and migrate south in the autumn.", "year": 2020},
    {"id": "mice", "title": "Mice", "text": "Mice hide from cats in small holes.", "year": 2005},
]
KEY = "correct-horse-battery-staple"


@pytest.fixture
def index_dir(tmp_path):
    path = tmp_path / "pets"
    BM25().index(DOCS).save(path)
    return path


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "key.txt"
    path.write_text(KEY + "\n")
    return path
