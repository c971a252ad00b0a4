
BchainJ<Ó½G®®?Àa¼ò-“4W®Ì8S´ÉeA<›I¤¶¥ÅwB…1¾HPÉ¶6A€<¬?M½ALB÷EY4[?