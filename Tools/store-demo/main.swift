print("store-demo: not built yet")
