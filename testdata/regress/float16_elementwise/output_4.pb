
BpeakJ®Ì8›IHP6A÷E