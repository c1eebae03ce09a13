"""The sources of the bundled mini suite: four small libraries, each a base tree and
features written as edits (path, old text, new text; old "" creates or appends).

`make_mini.py` turns them into CooperBench's on-disk format with real git.
"""

from __future__ import annotations

Edit = tuple[str, str, str]

TEXTKIT_CORE = '''"""Text helpers."""
import re

_WORD = re.compile(r"[A-Za-z0-9]+")


def slugify(text):
    """Lower-case words of `text` joined by '-'."""
    words = _WORD.findall(text)
    return "-".join(w.lower() for w in words)


def truncate(text, width):
    """`text` cut to `width` characters, the cut marked with '...'."""
    if len(text) <= width:
        return text
    return text[: width - 3] + "..."


def count_words(text):
    """How many words `text` has."""
    return len(_WORD.findall(text))
'''

TEXTKIT_TESTS = '''from textkit.core import count_words, slugify, truncate


def test_slugify():
    assert slugify("Hello, World!") == "hello-world"


def test_truncate():
    assert truncate("abcdefghij", 6) == "abc..."
    assert truncate("abc", 6) == "abc"


def test_count_words():
    assert count_words("one two  three") == 3
'''

INVOICE_CALC = '''"""Invoice arithmetic."""

TAX_RATE = 0.2


def subtotal(items):
    """Sum of price * quantity over (price, quantity) items."""
    return sum(price * qty for price, qty in items)


def tax(amount):
    """The tax due on `amount`."""
    return round(amount * TAX_RATE, 2)


def total(items):
    """What the customer pays."""
    net = subtotal(items)
    return round(net + tax(net), 2)
'''

INVOICE_TESTS = '''from invoice.calc import subtotal, tax, total


def test_subtotal():
    assert subtotal([(2.0, 3), (1.5, 2)]) == 9.0


def test_tax():
    assert tax(100.0) == 20.0


def test_total():
    assert total([(10.0, 10)]) == 120.0
'''

KV_STORE = '''"""An in-memory key-value store."""


class Store:
    def __init__(self):
        self._data = {}

    def set(self, key, value):
        self._data[key] = value

    def get(self, key, default=None):
        return self._data.get(key, default)

    def delete(self, key):
        self._data.pop(key, None)

    def __len__(self):
        return len(self._data)
'''

KV_TESTS = '''from kvstore.store import Store


def test_set_get_delete():
    s = Store()
    s.set("a", 1)
    assert s.get("a") == 1
    s.delete("a")
    assert s.get("a") is None
    assert len(s) == 0
'''

SHAPES_INIT = '''"""Plane shapes."""
from .circle import Circle
from .square import Square

__all__ = ["Circle", "Square"]
'''

SHAPES_CIRCLE = '''import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius**2
'''

SHAPES_SQUARE = '''class Square:
    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side**2
'''

SHAPES_TESTS = '''import math

from shapes import Circle, Square


def test_areas():
    assert Circle(1).area() == math.pi
    assert Square(3).area() == 9
'''

LIBS: dict[str, dict] = {
    "textkit": {
        "title": "textkit: small text helpers",
        "base": {"textkit/__init__.py": '"""textkit."""\n', "textkit/core.py": TEXTKIT_CORE,
                 "tests/test_core.py": TEXTKIT_TESTS},
        "tests": "tests/test_core.py",
        "features": [
            {
                "title": "slugify takes a separator",
                "md": "Add a keyword argument `separator` (default `\"-\"`) to "
                      "`textkit.core.slugify`: the words are joined with it.",
                "edits": [("textkit/core.py", 'def slugify(text):\n    """Lower-case words of '
                           '`text` joined by \'-\'."""\n    words = _WORD.findall(text)\n    '
                           'return "-".join(w.lower() for w in words)',
                           'def slugify(text, separator="-"):\n    """Lower-case words of `text` '
                           'joined by `separator`."""\n    words = _WORD.findall(text)\n    '
                           'return separator.join(w.lower() for w in words)')],
                "tests": [("tests/test_core.py", "", '\n\ndef test_slugify_separator():\n'
                           '    assert slugify("Hello, World!", separator="_") == "hello_world"\n'
                           '    assert slugify("a b") == "a-b"\n')],
            },
            {
                "title": "slugify takes a max_length",
                "md": "Add a keyword argument `max_length` (default `None`) to "
                      "`textkit.core.slugify`: when given, the slug is cut to at most that "
                      "many characters, without a trailing '-'.",
                "edits": [("textkit/core.py", 'def slugify(text):\n    """Lower-case words of '
                           '`text` joined by \'-\'."""\n    words = _WORD.findall(text)\n    '
                           'return "-".join(w.lower() for w in words)',
                           'def slugify(text, max_length=None):\n    """Lower-case words of '
                           '`text` joined by \'-\', at most `max_length` characters."""\n    '
                           'words = _WORD.findall(text)\n    slug = "-".join(w.lower() for w '
                           'in words)\n    if max_length is not None:\n        slug = '
                           'slug[:max_length].rstrip("-")\n    return slug')],
                "tests": [("tests/test_core.py", "", '\n\ndef test_slugify_max_length():\n'
                           '    assert slugify("Hello big World", max_length=9) == "hello-big"\n'
                           '    assert slugify("Hello big World", max_length=6) == "hello"\n')],
            },
            {
                "title": "strip_accents",
                "md": "Add `textkit.core.strip_accents(text)`: `text` with accents removed "
                      "(NFKD decomposition, combining marks dropped), using the standard "
                      "library's `unicodedata`.",
                "edits": [("textkit/core.py", "import re\n", "import re\nimport unicodedata\n"),
                          ("textkit/core.py", "    return len(_WORD.findall(text))\n",
                           "    return len(_WORD.findall(text))\n\n\ndef strip_accents(text):\n"
                           '    """`text` without accents."""\n    decomposed = '
                           'unicodedata.normalize("NFKD", text)\n    return "".join(c for c in '
                           "decomposed if not unicodedata.combining(c))\n")],
                "tests": [("tests/test_core.py", "", '\n\ndef test_strip_accents():\n'
                           '    from textkit.core import strip_accents\n\n'
                           '    assert strip_accents("café déjà") == "cafe deja"\n')],
            },
            {
                "title": "truncate takes a marker",
                "md": "Add a keyword argument `marker` (default `\"...\"`) to "
                      "`textkit.core.truncate`: the cut is marked with it, and the result is "
                      "still at most `width` characters. Also import `string` for later use "
                      "and export `ASCII_MARKERS = string.punctuation`.",
                "edits": [("textkit/core.py", "import re\n", "import re\nimport string\n"),
                          ("textkit/core.py", '_WORD = re.compile(r"[A-Za-z0-9]+")\n',
                           '_WORD = re.compile(r"[A-Za-z0-9]+")\n'
                           "ASCII_MARKERS = string.punctuation\n"),
                          ("textkit/core.py", 'def truncate(text, width):\n    """`text` cut to '
                           "`width` characters, the cut marked with '...'.\"\"\"\n    if len(text) "
                           '<= width:\n        return text\n    return text[: width - 3] + "..."',
                           'def truncate(text, width, marker="..."):\n    """`text` cut to '
                           '`width` characters, the cut marked with `marker`."""\n    if '
                           "len(text) <= width:\n        return text\n    return text[: width - "
                           "len(marker)] + marker")],
                "tests": [("tests/test_core.py", "", '\n\ndef test_truncate_marker():\n'
                           '    assert truncate("abcdefghij", 6, marker="~") == "abcde~"\n'
                           '    assert truncate("abcdefghij", 6) == "abc..."\n')],
            },
            {
                "title": "wrap",
                "md": "Add a module `textkit/wrap.py` with `wrap(text, width=70)`: the lines "
                      "of `text` wrapped at `width` characters (the standard library's "
                      "`textwrap`).",
                "edits": [("textkit/wrap.py", "", '"""Wrapping text."""\nimport textwrap\n\n\n'
                           'def wrap(text, width=70):\n    """`text` as lines of at most `width` '
                           'characters."""\n    return textwrap.wrap(text, width)\n')],
                "tests": [("tests/test_core.py", "", '\n\ndef test_wrap():\n'
                           '    from textkit.wrap import wrap\n\n'
                           '    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]\n')],
            },
        ],
    },
    "invoice": {
        "title": "invoice: invoice arithmetic",
        "base": {"invoice/__init__.py": '"""invoice."""\n', "invoice/calc.py": INVOICE_CALC,
                 "tests/test_calc.py": INVOICE_TESTS},
        "tests": "tests/test_calc.py",
        "features": [
            {
                "title": "shipping fee",
                "md": "Orders whose subtotal is under 100 pay a flat shipping fee of 5.0, "
                      "added by `invoice.calc.total` after tax (`SHIPPING_FEE`, "
                      "`FREE_SHIPPING_FROM`).",
                "edits": [("invoice/calc.py", '    net = subtotal(items)\n    return round(net '
                           "+ tax(net), 2)\n",
                           "    net = subtotal(items)\n    shipping = SHIPPING_FEE if net < "
                           "FREE_SHIPPING_FROM else 0.0\n    return round(net + tax(net) + "
                           "shipping, 2)\n"),
                          ("invoice/calc.py", 'def subtotal(items):',
                           "SHIPPING_FEE = 5.0\nFREE_SHIPPING_FROM = 100.0\n\n\n"
                           "def subtotal(items):")],
                "tests": [("tests/test_calc.py", "", '\n\ndef test_shipping():\n'
                           '    assert total([(10.0, 2)]) == 29.0\n'
                           '    assert total([(100.0, 1)]) == 120.0\n')],
            },
            {
                "title": "new tax rate",
                "md": "The tax rate is now 25%. `invoice.calc.tax` also takes an optional "
                      "`rate` to override it.",
                "edits": [("invoice/calc.py", "TAX_RATE = 0.2\n", "TAX_RATE = 0.25\n"),
                          ("invoice/calc.py", 'def tax(amount):\n    """The tax due on `amount`.'
                           '"""\n    return round(amount * TAX_RATE, 2)',
                           'def tax(amount, rate=None):\n    """The tax due on `amount` (at '
                           '`rate`, default TAX_RATE)."""\n    return round(amount * (TAX_RATE '
                           'if rate is None else rate), 2)')],
                "tests": [("tests/test_calc.py", "assert tax(100.0) == 20.0",
                           "assert tax(100.0) == 25.0"),
                          ("tests/test_calc.py", "assert total([(10.0, 10)]) == 120.0",
                           "assert total([(10.0, 10)]) == 125.0"),
                          ("tests/test_calc.py", "", '\n\ndef test_tax_rate():\n'
                           '    assert tax(200.0) == 50.0\n'
                           '    assert tax(200.0, rate=0.1) == 20.0\n')],
            },
            {
                "title": "format_money",
                "md": "Add `invoice.calc.format_money(amount, currency=\"EUR\")` returning "
                      "e.g. `\"12.50 EUR\"`, and a `total_text(items)` that formats `total`.",
                "edits": [("invoice/calc.py", "    return round(net + tax(net), 2)\n",
                           "    return round(net + tax(net), 2)\n\n\ndef format_money(amount, "
                           'currency="EUR"):\n    """`amount` with two decimals and its '
                           'currency."""\n    return f"{amount:.2f} {currency}"\n\n\n'
                           "def total_text(items):\n    return format_money(total(items))\n")],
                "tests": [("tests/test_calc.py", "", '\n\ndef test_format_money():\n'
                           '    from invoice.calc import format_money\n\n'
                           '    assert format_money(12.5) == "12.50 EUR"\n'
                           '    assert format_money(3, "USD") == "3.00 USD"\n')],
            },
            {
                "title": "invoice lines",
                "md": "Add `invoice.calc.CURRENCY = \"EUR\"` and `invoice.calc.line(price, qty)` "
                      "returning an invoice line such as `\"2 x 3.50 EUR\"`.",
                "edits": [("invoice/calc.py", "TAX_RATE = 0.2\n", "TAX_RATE = 0.2\n"
                           'CURRENCY = "EUR"\n'),
                          ("invoice/calc.py", "    return round(net + tax(net), 2)\n",
                           "    return round(net + tax(net), 2)\n\n\ndef line(price, qty):\n"
                           '    """One invoice line."""\n    return f"{qty} x {price:.2f} '
                           '{CURRENCY}"\n')],
                "tests": [("tests/test_calc.py", "", '\n\ndef test_line():\n'
                           '    from invoice.calc import line\n\n'
                           '    assert line(3.5, 2) == "2 x 3.50 EUR"\n')],
            },
            {
                "title": "minimum charge",
                "md": "`invoice.calc.total` charges at least 1.0 (an empty order costs 1.0).",
                "edits": [("invoice/calc.py", "    return round(net + tax(net), 2)\n",
                           "    return max(round(net + tax(net), 2), 1.0)\n")],
                "tests": [("tests/test_calc.py", "", '\n\ndef test_minimum_charge():\n'
                           '    assert total([]) == 1.0\n'
                           '    assert total([(0.5, 1)]) == 1.0\n')],
            },
        ],
    },
    "kvstore": {
        "title": "kvstore: an in-memory key-value store",
        "base": {"kvstore/__init__.py": '"""kvstore."""\n', "kvstore/store.py": KV_STORE,
                 "tests/test_store.py": KV_TESTS},
        "tests": "tests/test_store.py",
        "features": [
            {
                "title": "JSON export",
                "md": "Add a module `kvstore/serialize.py` with `to_json(store)`: the store's "
                      "items as a JSON object with sorted keys.",
                "edits": [("kvstore/serialize.py", "", '"""Exporting a store."""\nimport json\n'
                           "\n\ndef to_json(store):\n    return json.dumps(dict(store._data), "
                           "sort_keys=True)\n")],
                "tests": [("tests/test_store.py", "", '\n\ndef test_to_json():\n'
                           '    from kvstore.serialize import to_json\n\n'
                           '    s = Store()\n    s.set("b", 2)\n    s.set("a", 1)\n'
                           '    assert to_json(s) == \'{"a": 1, "b": 2}\'\n')],
            },
            {
                "title": "CSV export",
                "md": "Add a module `kvstore/serialize.py` with `to_csv(store)`: one "
                      "`key,value` line per item, sorted by key.",
                "edits": [("kvstore/serialize.py", "", '"""Exporting a store."""\n\n\n'
                           "def to_csv(store):\n    return \"\".join(f\"{k},{v}\\n\" for k, v "
                           "in sorted(store._data.items()))\n")],
                "tests": [("tests/test_store.py", "", '\n\ndef test_to_csv():\n'
                           '    from kvstore.serialize import to_csv\n\n'
                           '    s = Store()\n    s.set("b", 2)\n    s.set("a", 1)\n'
                           '    assert to_csv(s) == "a,1\\nb,2\\n"\n')],
            },
            {
                "title": "keys",
                "md": "Add `Store.keys()`: the keys, sorted.",
                "edits": [("kvstore/store.py", "    def __len__(self):\n        return "
                           "len(self._data)\n",
                           "    def __len__(self):\n        return len(self._data)\n\n"
                           "    def keys(self):\n        return sorted(self._data)\n")],
                "tests": [("tests/test_store.py", "", '\n\ndef test_keys():\n'
                           '    s = Store()\n    s.set("b", 2)\n    s.set("a", 1)\n'
                           '    assert s.keys() == ["a", "b"]\n')],
            },
            {
                "title": "default values",
                "md": "`Store(defaults=...)` takes a mapping of default values that `get` "
                      "returns for missing keys (an explicit `default` argument wins).",
                "edits": [("kvstore/store.py", "    def __init__(self):\n        self._data = "
                           "{}\n",
                           "    def __init__(self, defaults=None):\n        self._data = {}\n"
                           "        self._defaults = dict(defaults or {})\n"),
                          ("kvstore/store.py", "    def get(self, key, default=None):\n        "
                           "return self._data.get(key, default)\n",
                           "    def get(self, key, default=None):\n        if key in "
                           "self._data:\n            return self._data[key]\n        if default "
                           "is None:\n            return self._defaults.get(key)\n        "
                           "return default\n")],
                "tests": [("tests/test_store.py", "", '\n\ndef test_defaults():\n'
                           '    s = Store(defaults={"x": 7})\n    assert s.get("x") == 7\n'
                           '    assert s.get("x", 1) == 1\n    s.set("x", 3)\n'
                           '    assert s.get("x") == 3\n')],
            },
            {
                "title": "delete returns the value",
                "md": "`Store.delete(key)` returns the value it removed (None when the key "
                      "was missing).",
                "edits": [("kvstore/store.py", "    def delete(self, key):\n        "
                           "self._data.pop(key, None)\n",
                           "    def delete(self, key):\n        \"\"\"Remove `key`; its value, "
                           "or None.\"\"\"\n        return self._data.pop(key, None)\n")],
                "tests": [("tests/test_store.py", "", '\n\ndef test_delete_returns_value():\n'
                           '    s = Store()\n    s.set("a", 1)\n'
                           '    assert s.delete("a") == 1\n    assert s.delete("a") is None\n')],
            },
        ],
    },
    "shapes": {
        "title": "shapes: plane shapes",
        "base": {"shapes/__init__.py": SHAPES_INIT, "shapes/circle.py": SHAPES_CIRCLE,
                 "shapes/square.py": SHAPES_SQUARE, "tests/test_shapes.py": SHAPES_TESTS},
        "tests": "tests/test_shapes.py",
        "features": [
            {
                "title": "Triangle",
                "md": "Add `shapes.Triangle(base, height)` with `area()`, exported from the "
                      "package.",
                "edits": [("shapes/triangle.py", "", "class Triangle:\n    def __init__(self, "
                           "base, height):\n        self.base = base\n        self.height = "
                           "height\n\n    def area(self):\n        return self.base * "
                           "self.height / 2\n"),
                          ("shapes/__init__.py", "from .square import Square\n\n__all__ = "
                           '["Circle", "Square"]\n',
                           "from .square import Square\nfrom .triangle import Triangle\n\n"
                           '__all__ = ["Circle", "Square", "Triangle"]\n')],
                "tests": [("tests/test_shapes.py", "", '\n\ndef test_triangle():\n'
                           '    from shapes import Triangle\n\n'
                           '    assert Triangle(4, 3).area() == 6\n')],
            },
            {
                "title": "Hexagon",
                "md": "Add `shapes.Hexagon(side)` (regular) with `area()`, exported from the "
                      "package.",
                "edits": [("shapes/hexagon.py", "", "import math\n\n\nclass Hexagon:\n    def "
                           "__init__(self, side):\n        self.side = side\n\n    def "
                           "area(self):\n        return 3 * math.sqrt(3) / 2 * self.side**2\n"),
                          ("shapes/__init__.py", "from .square import Square\n\n__all__ = "
                           '["Circle", "Square"]\n',
                           "from .hexagon import Hexagon\nfrom .square import Square\n\n"
                           '__all__ = ["Circle", "Hexagon", "Square"]\n')],
                "tests": [("tests/test_shapes.py", "", '\n\ndef test_hexagon():\n'
                           '    from shapes import Hexagon\n\n'
                           '    assert round(Hexagon(2).area(), 6) == round(6 * math.sqrt(3), '
                           '6)\n')],
            },
            {
                "title": "Circle perimeter",
                "md": "Add `Circle.perimeter()`.",
                "edits": [("shapes/circle.py", "        return math.pi * self.radius**2\n",
                           "        return math.pi * self.radius**2\n\n    def perimeter(self):"
                           "\n        return 2 * math.pi * self.radius\n")],
                "tests": [("tests/test_shapes.py", "", '\n\ndef test_circle_perimeter():\n'
                           '    assert Circle(1).perimeter() == 2 * math.pi\n')],
            },
            {
                "title": "Square diagonal",
                "md": "Add `Square.diagonal()`.",
                "edits": [("shapes/square.py", "class Square:\n", "import math\n\n\n"
                           "class Square:\n"),
                          ("shapes/square.py", "        return self.side**2\n",
                           "        return self.side**2\n\n    def diagonal(self):\n        "
                           "return self.side * math.sqrt(2)\n")],
                "tests": [("tests/test_shapes.py", "", '\n\ndef test_square_diagonal():\n'
                           '    assert Square(1).diagonal() == math.sqrt(2)\n')],
            },
            {
                "title": "Rectangle",
                "md": "Add `shapes.Rectangle(width, height)` with `area()`, exported from the "
                      "package.",
                "edits": [("shapes/rectangle.py", "", "class Rectangle:\n    def __init__(self, "
                           "width, height):\n        self.width = width\n        self.height = "
                           "height\n\n    def area(self):\n        return self.width * "
                           "self.height\n"),
                          ("shapes/__init__.py", "from .circle import Circle\nfrom .square "
                           'import Square\n\n__all__ = ["Circle", "Square"]\n',
                           "from .circle import Circle\nfrom .rectangle import Rectangle\n"
                           'from .square import Square\n\n__all__ = ["Circle", "Rectangle", '
                           '"Square"]\n')],
                "tests": [("tests/test_shapes.py", "", '\n\ndef test_rectangle():\n'
                           '    from shapes import Rectangle\n\n'
                           '    assert Rectangle(2, 3).area() == 6\n')],
            },
        ],
    },
}
