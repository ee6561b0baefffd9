"""pytest-sadl: Surprise Adequacy and neuron coverage of Keras models, measured by pytest.

The criteria live in :mod:`pytest_sadl.criteria.surprise` and :mod:`pytest_sadl.criteria.neurons`; they
work on NumPy arrays and import neither TensorFlow nor pytest.
"""

__version__ = "0.1.0"
