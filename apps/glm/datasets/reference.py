#!/usr/bin/python3
"""reference.py: the optimum of ina-glm's objective, computed by scikit-learn (liblinear, lbfgs).

Usage: /usr/bin/python3 apps/glm/datasets/reference.py FILE LOSS L2 [--bias]
Prints min over x of  mean_i loss(a_i . x, y_i) + L2/2 |x|^2,  ina-glm's objective, with
LOSS squared (0.5 (z - y)^2: sklearn's Ridge, alpha = n L2), logistic (log(1 + e^(-yz)):
LogisticRegression, lbfgs, C = 1/(n L2)) or hinge (max(0, 1 - yz): LinearSVC, which is
liblinear's dual solver, C = 1/(n L2)). No intercept unless --bias (a feature of 1s, as
ina-glm --bias adds: regularised like the others). Classification labels > 0 are +1, else -1.
Needs Debian's python3-sklearn (use /usr/bin/python3, not a pyenv python).
"""
import sys

import numpy as np
from sklearn.datasets import load_svmlight_file


def objective(loss, X, y, w, l2):
    z = X @ w
    if loss == "squared":
        per = 0.5 * (z - y) ** 2
    elif loss == "logistic":
        per = np.logaddexp(0.0, -y * z)
    else:
        per = np.maximum(0.0, 1.0 - y * z)
    return per.mean() + 0.5 * l2 * w @ w


def main():
    args = [a for a in sys.argv[1:] if a != "--bias"]
    if len(args) != 3 or args[1] not in ("squared", "logistic", "hinge"):
        sys.exit(__doc__)
    path, loss, l2 = args[0], args[1], float(args[2])
    X, y = load_svmlight_file(path)
    X = X.toarray()
    if "--bias" in sys.argv:
        X = np.hstack([X, np.ones((X.shape[0], 1))])
    n = X.shape[0]
    if loss != "squared":
        y = np.where(y > 0, 1.0, -1.0)
    if loss == "squared":
        from sklearn.linear_model import Ridge
        m = Ridge(alpha=n * l2, fit_intercept=False, tol=1e-12).fit(X, y)
    elif loss == "logistic":
        from sklearn.linear_model import LogisticRegression
        m = LogisticRegression(C=1.0 / (n * l2), fit_intercept=False, tol=1e-12,
                               max_iter=100000).fit(X, y)
    else:
        from sklearn.svm import LinearSVC
        m = LinearSVC(loss="hinge", C=1.0 / (n * l2), fit_intercept=False, tol=1e-12,
                      max_iter=1000000).fit(X, y)
    print("%.9g" % objective(loss, X, y, np.ravel(m.coef_), l2))


if __name__ == "__main__":
    main()
