@_exported import LMDB
