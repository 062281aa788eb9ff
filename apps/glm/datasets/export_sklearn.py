#!/usr/bin/python3
"""export_sklearn.py: scikit-learn's bundled datasets as libsvm text for ina-glm (no download).

Usage: /usr/bin/python3 apps/glm/datasets/export_sklearn.py [--out DIR] [NAME ...]
NAME: breast_cancer (569 x 30, labels +1 malignant / -1 benign: logistic or hinge),
diabetes (442 x 10, a real-valued disease progression: squared loss), digits (1,797 x 64
pixels of 8x8 images, labels +1 for the digits 5..9, -1 for 0..4), wine (178 x 13, +1
for cultivar 0, -1 for the others). Default: all four.
Writes DIR/NAME.svm (DIR default: the current directory). Features are scaled as P4SGD
scales them, min-max to [0, 1] per column; the diabetes target is standardised (mean 0,
variance 1) so that a learning rate fits both. Values are written with 9 significant digits.
Needs Debian's python3-sklearn (use /usr/bin/python3, not a pyenv python).
"""
import argparse
import os
import sys


def rows(X, y):
    for xi, yi in zip(X, y):
        feats = " ".join("%d:%.9g" % (j + 1, v) for j, v in enumerate(xi) if v != 0.0)
        yield ("%.9g %s" % (yi, feats)).rstrip()


def minmax(X):
    lo, hi = X.min(axis=0), X.max(axis=0)
    span = hi - lo
    span[span == 0] = 1.0
    return (X - lo) / span


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".", help="directory for NAME.svm (default .)")
    ap.add_argument("names", nargs="*", default=["breast_cancer", "diabetes", "digits", "wine"])
    a = ap.parse_args()
    try:
        from sklearn import datasets
    except ImportError:
        sys.exit("export_sklearn.py: scikit-learn is missing (apt-get install python3-sklearn; "
                 "run with /usr/bin/python3)")
    os.makedirs(a.out, exist_ok=True)
    for name in a.names:
        if name == "breast_cancer":
            d = datasets.load_breast_cancer()
            X, y = minmax(d.data), [1.0 if t == 0 else -1.0 for t in d.target]  # 0 = malignant
        elif name == "diabetes":
            d = datasets.load_diabetes()
            X = minmax(d.data)
            y = (d.target - d.target.mean()) / d.target.std()
        elif name == "digits":
            d = datasets.load_digits()
            X, y = minmax(d.data), [1.0 if t >= 5 else -1.0 for t in d.target]
        elif name == "wine":
            d = datasets.load_wine()
            X, y = minmax(d.data), [1.0 if t == 0 else -1.0 for t in d.target]
        else:
            sys.exit("export_sklearn.py: unknown dataset %r (want breast_cancer, diabetes, "
                     "digits or wine)" % name)
        path = os.path.join(a.out, name + ".svm")
        with open(path, "w") as f:
            for line in rows(X, y):
                f.write(line + "\n")
        print("%s: %d samples x %d features" % (path, X.shape[0], X.shape[1]))


if __name__ == "__main__":
    main()
