"""MkDocs hook: typeset the formulas at build time, as MathML.

`pymdownx.arithmatex` (generic mode) wraps every formula of the pages and the docstrings in
`<span class="arithmatex">\\(...\\)</span>` or `<div class="arithmatex">\\[...\\]</div>`. This hook
replaces the TeX inside with MathML from `latex2mathml` (pure Python), which browsers render
natively: the built site needs no JavaScript, no CDN and no network. A formula that
`latex2mathml` cannot translate fails the build, naming the page and the formula.

Browsers lay MathML out properly (stretchy braces, script spacing) only with an OpenType math
font, which few systems have; the build copies STIX Two Math, shipped by the `ziamath` package,
next to `_static/math.css`, which uses it when the reader has no installed copy.
"""

import html
import importlib.metadata
import pathlib
import re
import shutil

from latex2mathml.converter import convert
from mkdocs.exceptions import PluginError


_MATH_FONT = "STIXTwoMath-Regular.ttf"
_ARITHMATEX = re.compile(
    r'<(?P<tag>span|div)(?P<attrs>[^>]*\bclass="arithmatex"[^>]*)>(?P<tex>.*?)</(?P=tag)>',
    re.DOTALL,
)
_WRAPS = {"span": ("\\(", "\\)"), "div": ("\\[", "\\]")}
# latex2mathml keeps a command it does not know as literal text, e.g. `<mi>\foo</mi>`.
_UNKNOWN_COMMAND = re.compile(r">\s*(\\[A-Za-z]+)")
# The one standard LaTeX operator name latex2mathml lacks (`\arg\max` is in the docstrings).
_ARG = re.compile(r"\\arg(?![A-Za-z])")
# latex2mathml leaves `\lVert`, `\rVert`, `\vert`, ... stretchy, so browsers grow them to the
# height of the whole formula; in TeX only `\left`, `\right` and `\big...` resize a delimiter.
_BARE_BAR = re.compile(r"<mo>(&#x02016;|&#x0007C;|&#x02223;)</mo>")


def _to_mathml(tex: str, display: str, where: str) -> str:
    try:
        mathml = convert(_ARG.sub(r"\\operatorname{arg}", tex), display=display)
    except Exception as error:  # latex2mathml raises many exception types
        raise PluginError(f"{where}: cannot typeset the formula {tex!r}: {error}") from error
    mathml = _BARE_BAR.sub(r'<mo stretchy="false">\1</mo>', mathml)
    unknown = _UNKNOWN_COMMAND.search(mathml)
    if unknown is not None:
        raise PluginError(
            f"{where}: latex2mathml does not know {unknown.group(1)}, used in the formula {tex!r}"
        )
    # The TeX source stays available to screen readers and to copy-paste tools.
    alttext = html.escape(tex, quote=True)
    return mathml.replace("<math ", f'<math alttext="{alttext}" ', 1)


def on_page_content(html_text, page, config, files):
    def typeset(match: re.Match) -> str:
        tag = match["tag"]
        opening, closing = _WRAPS[tag]
        tex = html.unescape(match["tex"]).strip()
        if not (tex.startswith(opening) and tex.endswith(closing)):
            raise PluginError(f"{page.file.src_uri}: unexpected arithmatex output {tex!r}")
        tex = tex[len(opening) : -len(closing)].strip()
        display = "inline" if tag == "span" else "block"
        mathml = _to_mathml(tex, display, page.file.src_uri)
        return f"<{tag}{match['attrs']}>{mathml}</{tag}>"

    return _ARITHMATEX.sub(typeset, html_text)


def on_post_build(config):
    # Found through the package's file list: importing ziamath would only emit its warnings.
    fonts = [f for f in importlib.metadata.files("ziamath") or () if f.name == _MATH_FONT]
    if not fonts:
        raise PluginError(f"the installed ziamath package does not ship {_MATH_FONT}")
    target = pathlib.Path(config["site_dir"], "_static", _MATH_FONT)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pathlib.Path(str(fonts[0].locate())), target)
