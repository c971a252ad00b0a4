Bmean_with_padsJ0=v¿µ÷½xj¿+[U¾è`½¾Ôf
¿ğŠ¾r:¾ÄH{¿skn¿_œ%¿—Z£¾