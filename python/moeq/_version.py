# The package's version; it needs a libmoeq of the same major.minor.
__version__ = "0.1.0"
