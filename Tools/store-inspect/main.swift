print("store-inspect: not built yet")
