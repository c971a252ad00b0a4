
Bex_tJ<£5‡<7*Y4‘E?4e;Ø:r@ G“@kI_Hy9@3Te9ú)ºF/uF­<¬@”Gî6z58@VC·0