"""CI orchestration, kept apart from the test fixtures: the release table, locks, release venvs, matrix cells,
their evidence records, the coverage page, tox.ini and the hosted-CI workflow, and the GPU lane (``ci.gpu``).

Why apart: ``fixtures/`` holds what tests use (tiny models, synthetic site-packages, wheels, the lanes); this
package decides what runs where and writes down what it showed.  ``python -m ci --help`` lists its commands.
"""
