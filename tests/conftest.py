import os
import sys

# Lets tests import the small helper modules kept beside them (toy_envs.py).
sys.path.insert(0, os.path.dirname(__file__))
