collection.fo.bar.x.y.blakwklsa.skla
