// MathJax is not fetched from a CDN (offline builds); formulas render as TeX source unless the
// reader's browser has MathJax. arithmatex(generic) wraps them in \( \) / \[ \].
window.MathJax = { tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]] } };
