"""torch.special lowerings: Bessel and Airy functions, orthogonal polynomials, erfcx,
ndtri and log_ndtr.

PyTorch's CPU kernels are the oracle, so each lowering evaluates the algorithm of ATen's
CPU kernel (ATen/native/Math.h: mostly Cephes' rational and Chebyshev-series
approximations, whose coefficient tables are below) in the output dtype, keeping its
branch points, special values and loop exits. Integer and bool inputs compute in the
default float dtype, as these `promotes_int_to_float` kernels do; half-precision inputs
(only i0e, i1 and i1e take them) in float32.
"""
import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ._common import cast, convert, cpu_kernel_lacks_half
from .elementwise import _out, _unary_float
from .registry import lowering

aten = torch.ops.aten

# ------------------------------------------------------------------ Cephes coefficient tables
# Highest degree first (the order `_horner` and `_chebyshev_series` consume them).
_AIRY_AN = (
    3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
    1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
    1.40264691163389668864e+01, 9.99999999999999995305e-01,
)
_AIRY_AD = (
    5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
    1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
    1.40959135607834029598e+01, 1.00000000000000000470e+00,
)
_AIRY_AFN = (
    -1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
    -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
    -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08,
)
_AIRY_AFD = (
    1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
    9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
    4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07,
)
_AIRY_AGN = (
    1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
    9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
    5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
    8.11789239554389293311e-08, 3.41551784765923618484e-10,
)
_AIRY_AGD = (
    9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
    5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
    4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
    4.91834570062930015649e-09,
)
_J0_PP = (
    7.96936729297347051624e-04, 8.28352392107440799803e-02, 1.23953371646414299388e+00,
    5.44725003058768775090e+00, 8.74716500199817011941e+00, 5.30324038235394892183e+00,
    9.99999999999999997821e-01,
)
_J0_PQ = (
    9.24408810558863637013e-04, 8.56288474354474431428e-02, 1.25352743901058953537e+00,
    5.47097740330417105182e+00, 8.76190883237069594232e+00, 5.30605288235394617618e+00,
    1.00000000000000000218e+00,
)
_J0_QP = (
    -1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01,
    -9.32060152123768231369e+01, -1.77681167980488050595e+02, -1.47077505154951170175e+02,
    -5.14105326766599330220e+01, -6.05014350600728481186e+00,
)
_J0_QQ = (
    6.43178256118178023184e+01, 8.56430025976980587198e+02, 3.88240183605401609683e+03,
    7.24046774195652478189e+03, 5.93072701187316984827e+03, 2.06209331660327847417e+03,
    2.42005740240291393179e+02,
)
_J0_RP = (
    -4.79443220978201773821e+09, 1.95617491946556577543e+12, -2.49248344360967716204e+14,
    9.70862251047306323952e+15,
)
_J0_RQ = (
    4.99563147152651017219e+02, 1.73785401676374683123e+05, 4.84409658339962045305e+07,
    1.11855537045356834862e+10, 2.11277520115489217587e+12, 3.10518229857422583814e+14,
    3.18121955943204943306e+16, 1.71086294081043136091e+18,
)
_J1_PP = (
    7.62125616208173112003e-04, 7.31397056940917570436e-02, 1.12719608129684925192e+00,
    5.11207951146807644818e+00, 8.42404590141772420927e+00, 5.21451598682361504063e+00,
    1.00000000000000000254e+00,
)
_J1_PQ = (
    5.71323128072548699714e-04, 6.88455908754495404082e-02, 1.10514232634061696926e+00,
    5.07386386128601488557e+00, 8.39985554327604159757e+00, 5.20982848682361821619e+00,
    9.99999999999999997461e-01,
)
_J1_QP = (
    5.10862594750176621635e-02, 4.98213872951233449420e+00, 7.58238284132545283818e+01,
    3.66779609360150777800e+02, 7.10856304998926107277e+02, 5.97489612400613639965e+02,
    2.11688757100572135698e+02, 2.52070205858023719784e+01,
)
_J1_QQ = (
    7.42373277035675149943e+01, 1.05644886038262816351e+03, 4.98641058337653607651e+03,
    9.56231892404756170795e+03, 7.99704160447350683650e+03, 2.82619278517639096600e+03,
    3.36093607810698293419e+02,
)
_J1_RP = (
    -8.99971225705559398224e+08, 4.52228297998194034323e+11, -7.27494245221818276015e+13,
    3.68295732863852883286e+15,
)
_J1_RQ = (
    6.20836478118054335476e+02, 2.56987256757748830383e+05, 8.35146791431949253037e+07,
    2.21511595479792499675e+10, 4.74914122079991414898e+12, 7.84369607876235854894e+14,
    8.95222336184627338078e+16, 5.32278620332680085395e+18,
)
_Y0_YP = (
    1.55924367855235737965e+04, -1.46639295903971606143e+07, 5.43526477051876500413e+09,
    -9.82136065717911466409e+11, 8.75906394395366999549e+13, -3.46628303384729719441e+15,
    4.42733268572569800351e+16, -1.84950800436986690637e+16,
)
_Y0_YQ = (
    1.04128353664259848412e+03, 6.26107330137134956842e+05, 2.68919633393814121987e+08,
    8.64002487103935000337e+10, 2.02979612750105546709e+13, 3.17157752842975028269e+15,
    2.50596256172653059228e+17,
)
_Y1_YP = (
    1.26320474790178026440e+09, -6.47355876379160291031e+11, 1.14509511541823727583e+14,
    -8.12770255501325109621e+15, 2.02439475713594898196e+17, -7.78877196265950026825e+17,
)
_Y1_YQ = (
    5.94301592346128195359e+02, 2.35564092943068577943e+05, 7.34811944459721705660e+07,
    1.87601316108706159478e+10, 3.88231277496238566008e+12, 6.20557727146953693363e+14,
    6.87141087355300489866e+16, 3.97270608116560655612e+18,
)
_I0_A = (
    -4.41534164647933937950e-18, 3.33079451882223809783e-17, -2.43127984654795469359e-16,
    1.71539128555513303061e-15, -1.16853328779934516808e-14, 7.67618549860493561688e-14,
    -4.85644678311192946090e-13, 2.95505266312963983461e-12, -1.72682629144155570723e-11,
    9.67580903537323691224e-11, -5.18979560163526290666e-10, 2.65982372468238665035e-09,
    -1.30002500998624804212e-08, 6.04699502254191894932e-08, -2.67079385394061173391e-07,
    1.11738753912010371815e-06, -4.41673835845875056359e-06, 1.64484480707288970893e-05,
    -5.75419501008210370398e-05, 1.88502885095841655729e-04, -5.76375574538582365885e-04,
    1.63947561694133579842e-03, -4.32430999505057594430e-03, 1.05464603945949983183e-02,
    -2.37374148058994688156e-02, 4.93052842396707084878e-02, -9.49010970480476444210e-02,
    1.71620901522208775349e-01, -3.04682672343198398683e-01, 6.76795274409476084995e-01,
)
_I0_B = (
    -7.23318048787475395456e-18, -4.83050448594418207126e-18, 4.46562142029675999901e-17,
    3.46122286769746109310e-17, -2.82762398051658348494e-16, -3.42548561967721913462e-16,
    1.77256013305652638360e-15, 3.81168066935262242075e-15, -9.55484669882830764870e-15,
    -4.15056934728722208663e-14, 1.54008621752140982691e-14, 3.85277838274214270114e-13,
    7.18012445138366623367e-13, -1.79417853150680611778e-12, -1.32158118404477131188e-11,
    -3.14991652796324136454e-11, 1.18891471078464383424e-11, 4.94060238822496958910e-10,
    3.39623202570838634515e-09, 2.26666899049817806459e-08, 2.04891858946906374183e-07,
    2.89137052083475648297e-06, 6.88975834691682398426e-05, 3.36911647825569408990e-03,
    8.04490411014108831608e-01,
)
_I1_A = (
    2.77791411276104639959e-18, -2.11142121435816608115e-17, 1.55363195773620046921e-16,
    -1.10559694773538630805e-15, 7.60068429473540693410e-15, -5.04218550472791168711e-14,
    3.22379336594557470981e-13, -1.98397439776494371520e-12, 1.17361862988909016308e-11,
    -6.66348972350202774223e-11, 3.62559028155211703701e-10, -1.88724975172282928790e-09,
    9.38153738649577178388e-09, -4.44505912879632808065e-08, 2.00329475355213526229e-07,
    -8.56872026469545474066e-07, 3.47025130813767847674e-06, -1.32731636560394358279e-05,
    4.78156510755005422638e-05, -1.61760815825896745588e-04, 5.12285956168575772895e-04,
    -1.51357245063125314899e-03, 4.15642294431288815669e-03, -1.05640848946261981558e-02,
    2.47264490306265168283e-02, -5.29459812080949914269e-02, 1.02643658689847095384e-01,
    -1.76416518357834055153e-01, 2.52587186443633654823e-01,
)
_I1_B = (
    7.51729631084210481353e-18, 4.41434832307170791151e-18, -4.65030536848935832153e-17,
    -3.20952592199342395980e-17, 2.96262899764595013876e-16, 3.30820231092092828324e-16,
    -1.88035477551078244854e-15, -3.81440307243700780478e-15, 1.04202769841288027642e-14,
    4.27244001671195135429e-14, -2.10154184277266431302e-14, -4.08355111109219731823e-13,
    -7.19855177624590851209e-13, 2.03562854414708950722e-12, 1.41258074366137813316e-11,
    3.25260358301548823856e-11, -1.89749581235054123450e-11, -5.58974346219658380687e-10,
    -3.83538038596423702205e-09, -2.63146884688951950684e-08, -2.51223623787020892529e-07,
    -3.88256480887769039346e-06, -1.10588938762623716291e-04, -9.76109749136146840777e-03,
    7.78576235018280120474e-01,
)
_K0_A = (
    1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11,
    1.90451637722020886025e-09, 2.53479107902614945675e-07, 2.28621210311945178607e-05,
    1.26461541144692592338e-03, 3.59799365153615016266e-02, 3.44289899924628486886e-01,
    -5.35327393233902768720e-01,
)
_K0_B = (
    5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17,
    -1.67823109680541210385e-16, 5.51205597852431940784e-16, -1.84859337734377901440e-15,
    6.34007647740507060557e-15, -2.22751332699166985548e-14, 8.03289077536357521100e-14,
    -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
    1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10,
    -1.69753450938905987466e-09, 8.57403401741422608519e-09, -4.66048989768794782956e-08,
    2.76681363944501510342e-07, -1.83175552271911948767e-06, 1.39498137188764993662e-05,
    -1.28495495816278026384e-04, 1.56988388573005337491e-03, -3.14481013119645005427e-02,
    2.44030308206595545468e+00,
)
_K1_A = (
    -7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13,
    -1.41148839263352776110e-10, -2.21338763073472585583e-08, -2.43340614156596823496e-06,
    -1.73028895751305206302e-04, -6.97572385963986435018e-03, -1.22611180822657148235e-01,
    -3.53155960776544875667e-01, 1.52530022733894777053e+00,
)
_K1_B = (
    -5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17,
    1.83809354436663880070e-16, -6.05704724837331885336e-16, 2.03870316562433424052e-15,
    -7.01983709041831346144e-15, 2.47715442448130437068e-14, -8.97670518232499435011e-14,
    3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
    -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10,
    2.01504975519703286596e-09, -1.03457624656780970260e-08, 5.74108412545004946722e-08,
    -3.50196060308781257119e-07, 2.40648494783721712015e-06, -1.93619797416608296024e-05,
    1.95215518471351631108e-04, -2.85781685962277938680e-03, 1.03923736576817238437e-01,
    2.72062619048444266945e+00,
)


# ------------------------------------------------------------------ evaluation helpers
def _horner(coeffs, z):
    """The polynomial with `coeffs` (highest degree first) at `z`, accumulated from zero
    as ATen's loops do (`acc = acc * z + c`), so an infinite `z` gives NaN as on CPU."""
    acc = jnp.zeros_like(z)
    for c in coeffs:
        acc = acc * z + c
    return acc


def _chebyshev_series(coeffs, y):
    """Cephes' `chbevl`: the Chebyshev series with `coeffs` at `y` (in [-2, 2], twice
    the usual argument) by Clenshaw's recurrence."""
    p = q = jnp.zeros_like(y)
    a = jnp.full_like(y, coeffs[0])
    for c in coeffs[1:]:
        p, q = q, a
        a = y * q - p + c
    return 0.5 * (a - p)


def _div_exact(a, c):
    """a / c (c a number or scalar) correctly rounded, as CPU divides: XLA divides by a
    constant or a broadcast scalar by multiplying with its rounded reciprocal, up to an
    ulp off, unless the divisor is a full array it cannot see through."""
    return a / lax.optimization_barrier(jnp.broadcast_to(jnp.asarray(c, a.dtype), a.shape))


def _first(cases, default):
    """The value of the first `(mask, value)` of `cases` whose mask holds, else `default`:
    a CPU kernel's chain of early returns, elementwise."""
    for mask, value in reversed(cases):
        default = jnp.where(mask, value, default)
    return default


# ------------------------------------------------------------------ Bessel and Airy functions
_PI_4 = 0.785398163397448309615660845819875721
_3PI_4 = 2.356194490192344928846982537459627163
_SQRT_2_PI = 0.797884560802865355879892119868763737  # sqrt(2 / pi)
_2_PI = 0.636619772367581343075535053490057448  # 2 / pi
_1_SQRT_PI = 0.564189583547756286948  # 1 / sqrt(pi)


def _hankel(x, w, pp, pq, qp, qq, phase, second_kind):
    """Cephes' large-argument form of J0/J1 (Y0/Y1 with `second_kind`): sqrt(2 / (pi x))
    (P cos(x - phase) - Q sin(x - phase)), P and Q rational in `w` = (5 / x)^2."""
    p = _horner(pp, w) / _horner(pq, w)
    q = 5.0 / x * (_horner(qp, w) / _horner(qq, w))
    s, c = jnp.sin(x - phase), jnp.cos(x - phase)
    v = p * s + q * c if second_kind else p * c - q * s
    return v * _SQRT_2_PI / jnp.sqrt(x)


def _j0(x):
    """aten::special_bessel_j0 (Cephes j0): 1 - x^2 / 4 below 1e-5, a rational function
    of x^2 with the first two zeros factored out up to 5, `_hankel` beyond."""
    x = jnp.where(x < 0, -x, x)
    z = x * x
    near = (z - 5.78318596294678452118) * (z - 30.4712623436620863991) * _horner(_J0_RP, z) / _horner(_J0_RQ, z)
    near = jnp.where(x < 0.00001, 1.0 - z / 4.0, near)
    return jnp.where(x <= 5.0, near, _hankel(x, 25.0 / z, _J0_PP, _J0_PQ, _J0_QP, _J0_QQ, _PI_4, False))


def _j1(x):
    """aten::special_bessel_j1 (Cephes j1): x times a rational function of x^2 with the
    first two zeros factored out up to |x| = 5, `_hankel` beyond."""
    # Odd: CPU evaluates -J1(-x) below zero, which keeps J1(-0.0) = -0.0.
    a = jnp.where(x < 0, -x, x)
    z = a * a
    near = _horner(_J1_RP, z) / _horner(_J1_RQ, z) * a * (z - 14.6819706421238932572) * (z - 49.2184563216946036703)
    w = 5.0 / a * (5.0 / a)
    r = jnp.where(a <= 5.0, near, _hankel(a, w, _J1_PP, _J1_PQ, _J1_QP, _J1_QQ, _3PI_4, False))
    return jnp.where(x < 0, -r, r)


def _y0(x):
    """aten::special_bessel_y0 (Cephes y0): a rational function of x^2 plus
    (2 / pi) log(x) J0(x) up to 5, `_hankel` beyond; -inf at 0, NaN below."""
    z = x * x
    near = _horner(_Y0_YP, z) / _horner(_Y0_YQ, z) + _2_PI * jnp.log(x) * _j0(x)
    near = _first([(x == 0, -jnp.inf), (x < 0, jnp.nan)], near)
    return jnp.where(x <= 5.0, near, _hankel(x, 25.0 / z, _J0_PP, _J0_PQ, _J0_QP, _J0_QQ, _PI_4, True))


def _y1(x):
    """aten::special_bessel_y1 (Cephes y1): x times a rational function of x^2 plus
    (2 / pi) (J1(x) log(x) - 1 / x) up to 5, `_hankel` beyond; -inf at 0, NaN below."""
    z = x * x
    near = x * (_horner(_Y1_YP, z) / _horner(_Y1_YQ, z)) + _2_PI * (_j1(x) * jnp.log(x) - 1.0 / x)
    near = _first([(x == 0, -jnp.inf), (x < 0, jnp.nan)], near)
    w = 5.0 / x * (5.0 / x)
    return jnp.where(x <= 5.0, near, _hankel(x, w, _J1_PP, _J1_PQ, _J1_QP, _J1_QQ, _3PI_4, True))


def _i0(x):
    """aten::special_modified_bessel_i0 (Cephes i0): e^|x| times a Chebyshev series in
    |x| / 2 - 2 up to 8, in 32 / |x| - 2 (over sqrt|x|) beyond."""
    a = jnp.abs(x)
    near = jnp.exp(a) * _chebyshev_series(_I0_A, a / 2.0 - 2.0)
    far = jnp.exp(a) * _chebyshev_series(_I0_B, 32.0 / a - 2.0) / jnp.sqrt(a)
    return jnp.where(a <= 8.0, near, far)


def _i1(x):
    """aten::special_modified_bessel_i1 (Cephes i1): as `_i0` with I1's series, odd."""
    a = jnp.abs(x)
    near = _chebyshev_series(_I1_A, a / 2.0 - 2.0) * a * jnp.exp(a)
    far = jnp.exp(a) * _chebyshev_series(_I1_B, 32.0 / a - 2.0) / jnp.sqrt(a)
    r = jnp.where(a <= 8.0, near, far)
    return jnp.where(x < 0, -r, r)


def _k(x, order: int, scaled: bool):
    """aten::special_modified_bessel_k0 / k1 and their scaled_ forms (Cephes k0, k1, k0e,
    k1e): K0 / K1 (times e^x if `scaled`) by a Chebyshev series in x^2 - 2 up to 2, with
    the logarithmic term -log(x / 2) I0(x) (log(x / 2) I1(x) + 1 / x for K1), and in
    8 / x - 2 beyond; +inf at 0, NaN below."""
    if order == 0:
        near = _chebyshev_series(_K0_A, x * x - 2.0) - jnp.log(0.5 * x) * _i0(x)
        far = _chebyshev_series(_K0_B, 8.0 / x - 2.0)
    else:
        near = jnp.log(0.5 * x) * _i1(x) + _chebyshev_series(_K1_A, x * x - 2.0) / x
        far = _chebyshev_series(_K1_B, 8.0 / x - 2.0)
    if scaled:
        near, far = near * jnp.exp(x), far / jnp.sqrt(x)
    else:
        far = jnp.exp(-x) * far / jnp.sqrt(x)
    return _first([(x == 0, jnp.inf), (x < 0, jnp.nan)], jnp.where(x <= 2.0, near, far))


def _airy_ai(x):
    """aten::special_airy_ai (Cephes airy, Ai only): the oscillatory asymptotic series
    below -2.09, the exponentially decaying one from 2.09 (0 past 103.892), and between
    them the Maclaurin series summed until a term falls under machine epsilon; NaN at
    +-inf."""
    dtype = x.dtype
    # Below -2.09. An ulp of the phase is amplified by the phase's size: divide as CPU does.
    zeta_neg = _div_exact(-2.0 * x * jnp.sqrt(-x), 3.0)
    z = 1.0 / zeta_neg
    zz = z * z
    t = zeta_neg + 0.25 * np.pi
    amp_sin = 1.0 + zz * _horner(_AIRY_AFN, zz) / _horner(_AIRY_AFD, zz)
    amp_cos = z * _horner(_AIRY_AGN, zz) / _horner(_AIRY_AGD, zz)
    neg = _1_SQRT_PI / jnp.sqrt(jnp.sqrt(-x)) * (jnp.sin(t) * amp_sin - jnp.cos(t) * amp_cos)
    # From 2.09.
    zeta = _div_exact(2.0 * x * jnp.sqrt(x), 3.0)
    ratio = _horner(_AIRY_AN, 1.0 / zeta) / _horner(_AIRY_AD, 1.0 / zeta)
    pos = _1_SQRT_PI * ratio / (2.0 * jnp.sqrt(jnp.sqrt(x)) * jnp.exp(zeta))
    # Between: f and g are the two Maclaurin series, summed until CPU's loop would stop
    # (the term ratio |m / f| at or under epsilon, or NaN), per element.
    inside = ~((x < -2.09) | (x >= 2.09))  # NaN too: it leaves the loop at once, as NaN
    xs = jnp.where(inside, x, 0.0)
    cube = xs * xs * xs
    eps = jnp.finfo(dtype).eps

    def cond(c):  # (the count only guards: on its interval the series needs under 20 terms)
        return jnp.any(inside & (c[-1] > eps)) & (c[0] < 200)

    def body(c):
        i, k, f, g, m, n, t = c
        go = inside & (t > eps)
        m2 = _div_exact(_div_exact(m * cube, k + 1.0), k + 2.0)
        n2 = _div_exact(_div_exact(n * cube, k + 2.0), k + 3.0)
        f2 = f + m2
        upd = lambda new, old: jnp.where(go, new, old)  # noqa: E731
        return i + 1, k + 3.0, upd(f2, f), upd(g + n2, g), upd(m2, m), upd(n2, n), upd(jnp.abs(m2 / f2), t)

    one = jnp.ones_like(xs)
    start = (jnp.asarray(0), jnp.asarray(1.0, dtype), one, xs, one, xs, one)
    _, _, f, g, _, _, _ = lax.while_loop(cond, body, start)
    series = 0.355028053887817239260 * f - 0.258819403792806798405 * g
    return _first([(jnp.isinf(x), jnp.nan), (x > 103.892, 0.0), (x < -2.09, neg), (x >= 2.09, pos)], series)


def _spherical_j0(x):
    """aten::special_spherical_bessel_j0: sin(x) / x, its Taylor series below 1/2, 0 at
    +-inf."""
    z = x * x
    series = 1.0 + z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0 + z * (
        1.0 / 362880.0 + z * (-1.0 / 39916800.0 + z * (1.0 / 6227020800.0))))))
    return _first([(jnp.isinf(x), 0.0), (jnp.abs(x) < 0.5, series)], jnp.sin(x) / x)


# ------------------------------------------------------------------ error function relatives
def _erfcx_nonnegative(x):
    """exp(x^2) erfc(x) for x >= 0 to within a few ulp: directly below 2, where erfc
    has not underflowed and x^2 is small enough that its rounding does not matter; from
    2 on, Laplace's continued fraction 1 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) /
    (x + ...)))), 60 levels deep (converged to float64 precision from 2 on, and free of
    overflow for any x)."""
    direct = jnp.exp(x * x) * jax.scipy.special.erfc(x)
    xc = jnp.maximum(x, 2.0)
    acc = xc
    for k in range(60, 0, -1):
        acc = xc + (k / 2.0) / acc
    return jnp.where(x < 2.0, direct, _1_SQRT_PI / acc)


def _erfcx(x):
    """aten::special_erfcx, exp(x^2) erfc(x): ATen's calc_erfcx (the Faddeeva package's)
    in its branches below zero, 2 exp(x^2) - erfcx(-x) with its cut-offs;
    `_erfcx_nonnegative` stands in for its Chebyshev table at x >= 0."""
    twice = 2.0 * jnp.exp(x * x)
    neg = jnp.where(x < -6.1, twice, twice - _erfcx_nonnegative(jnp.abs(x)))
    return _first([(jnp.isnan(x), x), (x >= 0, _erfcx_nonnegative(jnp.abs(x))), (x < -26.7, jnp.inf)], neg)


def _log_ndtr(x):
    """aten::special_log_ndtr: ATen's calc_log_ndtr (SciPy's): log(erfcx(-t) / 2) - t^2
    with t = x / sqrt(2) below -1, log1p(-erfc(t) / 2) above."""
    t = x * 0.707106781186547524400844362104849039
    low = jnp.log(_erfcx(-t) / 2.0) - t * t
    return jnp.where(x < -1.0, low, jnp.log1p(-jax.scipy.special.erfc(t) / 2.0))


_UNARY = {
    aten.special_airy_ai: _airy_ai,
    aten.special_bessel_j0: _j0,
    aten.special_bessel_j1: _j1,
    aten.special_bessel_y0: _y0,
    aten.special_bessel_y1: _y1,
    aten.special_modified_bessel_i0: _i0,
    aten.special_modified_bessel_i1: _i1,
    aten.special_modified_bessel_k0: lambda x: _k(x, 0, False),
    aten.special_modified_bessel_k1: lambda x: _k(x, 1, False),
    aten.special_scaled_modified_bessel_k0: lambda x: _k(x, 0, True),
    aten.special_scaled_modified_bessel_k1: lambda x: _k(x, 1, True),
    aten.special_spherical_bessel_j0: _spherical_j0,
    aten.special_erfcx: _erfcx,
    aten.special_log_ndtr: _log_ndtr,
    # JAX's ndtri is Cephes' algorithm, ATen's calc_ndtri too.
    aten.special_ndtri: jax.scipy.special.ndtri,
    # Cephes' i0e, i1, i1e (ATen's calc_i0e, calc_i1, calc_i1e) in JAX.
    aten.special_i0e: jax.scipy.special.i0e,
    aten.special_i1: jax.scipy.special.i1,
    aten.special_i1e: jax.scipy.special.i1e,
}
# CPU's kernels of these have float and double cases only (i0e, i1, i1e have all four).
_NO_HALF_KERNEL = {op for op in _UNARY if op not in (aten.special_i0e, aten.special_i1, aten.special_i1e)}
for _op, _fn in _UNARY.items():
    _low = _unary_float(_fn)
    if _op in _NO_HALF_KERNEL:
        _low = cpu_kernel_lacks_half(_op.__name__.removeprefix("special_") + "_cpu")(_low)
    lowering(_op.default)(_low)


# ------------------------------------------------------------------ orthogonal polynomials
def _recurrence(step, n, q, run):
    """CPU's three-term loop `p = 1; for (k = 1; k < n && !isnan(q); ++k) { r = step(k,
    p, q); p = q; q = r; }` on the elements where `run`, returning the final q (q enters
    as the degree-1 value). Each element runs its own trip count, as on CPU: a
    recurrence that overflows reaches NaN and stops there. (CPU's Hermite loops do not
    test for NaN, but NaN is absorbing in them, so the result is the same.)"""
    def active(k, q):
        return run & (k < n) & ~jnp.isnan(q)

    def body(c):
        k, p, q = c
        go = active(k, q)
        r = step(k.astype(q.dtype), p, q)
        return k + 1, jnp.where(go, q, p), jnp.where(go, r, q)

    start = (jnp.asarray(1, n.dtype), jnp.ones_like(q), q)
    return lax.while_loop(lambda c: jnp.any(active(c[0], c[2])), body, start)[2]


def _polynomial(x, n, cases, q1, step):
    """CPU's early returns `cases` ((mask, value) in CPU's order, n < 0 -> 0 first),
    else the recurrence from degree 1 value `q1`."""
    cases = [(n < 0, 0.0)] + cases
    taken = cases[0][0]
    for mask, _ in cases[1:]:
        taken = taken | mask
    return _first(cases, _recurrence(step, n, q1, ~taken))


def _arccos(x):
    """acos, correctly rounded in float32 as CPU's acosf is (XLA's float32 acos is often an
    ulp off, and the trigonometric forms multiply that error by n)."""
    if x.dtype == jnp.float32:
        return jnp.arccos(x.astype(jnp.float64)).astype(x.dtype)
    return jnp.arccos(x)


def _parity(n, even, odd):
    return jnp.where(n % 2 == 0, even, odd)


def _chebyshev_t(x, n):
    """aten::special_chebyshev_polynomial_t: T_n(x) by T_{k+1} = 2x T_k - T_{k-1}, or
    cos(n acos x) for |x| < 1 and n > 6; +-1 at |x| = 1."""
    two_x = x + x
    trig = (n > 6) & (jnp.abs(x) < 1.0)
    return _polynomial(x, n, [
        (jnp.abs(x) == 1.0, jnp.where((x > 0) | (n % 2 == 0), 1.0, -1.0)),
        (trig, jnp.cos(n.astype(x.dtype) * _arccos(x))),
        (n == 0, 1.0),
    ], x, lambda k, p, q: two_x * q - p)


def _chebyshev_u(x, n):
    """aten::special_chebyshev_polynomial_u: U_n(x) by the recurrence from U_1 = 2x, or
    sin((n + 1) theta) / sin(theta), theta = acos x, for |x| < 1 and n > 8."""
    two_x = x + x
    n1 = (n + 1).astype(x.dtype)
    theta = _arccos(x)
    s = jnp.sin(theta)
    trig = jnp.where(s != 0, jnp.sin(n1 * theta) / s, n1 * jnp.cos(n1 * theta) / x)
    return _polynomial(x, n, [
        (jnp.abs(x) == 1.0, jnp.where((x > 0) | (n % 2 == 0), n1, -n1)),
        ((n > 8) & (jnp.abs(x) < 1.0), trig),
        (n == 0, 1.0),
    ], two_x, lambda k, p, q: two_x * q - p)


def _chebyshev_v(x, n):
    """aten::special_chebyshev_polynomial_v: V_n(x) by the recurrence from V_1 = 2x - 1,
    or cos((n + 1/2) theta) / cos(theta / 2) for |x| < 1 and n > 8."""
    two_x = x + x
    odd = (n + n + 1).astype(x.dtype)
    theta = _arccos(x)
    trig = jnp.where(jnp.sin(theta / 2.0) != 1.0, jnp.cos((n.astype(x.dtype) + 0.5) * theta) / jnp.cos(theta / 2.0),
                     _parity(n, odd, -odd))
    return _polynomial(x, n, [
        (jnp.abs(x) == 1.0, jnp.where(x > 0, 1.0, _parity(n, odd, -odd))),
        ((n > 8) & (jnp.abs(x) < 1.0), trig),
        (n == 0, 1.0),
    ], two_x - 1.0, lambda k, p, q: two_x * q - p)


def _chebyshev_w(x, n):
    """aten::special_chebyshev_polynomial_w: W_n(x) by the recurrence from W_1 = 2x + 1,
    or sin((n + 1/2) theta) / sin(theta / 2) for |x| < 1 and n > 8."""
    two_x = x + x
    odd = (n + n + 1).astype(x.dtype)
    at_one = jnp.where(x > 0, odd, _parity(n, 1.0, -1.0))
    theta = _arccos(x)
    trig = jnp.where(jnp.cos(theta / 2.0) != 1.0, jnp.sin((n.astype(x.dtype) + 0.5) * theta) / jnp.sin(theta / 2.0),
                     at_one)
    return _polynomial(x, n, [
        (jnp.abs(x) == 1.0, at_one),
        ((n > 8) & (jnp.abs(x) < 1.0), trig),
        (n == 0, 1.0),
    ], two_x + 1.0, lambda k, p, q: two_x * q - p)


def _shifted_chebyshev(kind: str):
    """aten::special_shifted_chebyshev_polynomial_{t,u,v,w}: the Chebyshev polynomial of
    `kind` at y = 2x - 1, with CPU's own special values
    at x = 0 and x = 1 and its thresholds for the trigonometric forms (n > 6; n > 4 for
    W), which differ from the unshifted polynomials'."""

    def fn(x, n):
        y = x + x - 1.0
        two_y = y + y
        nt = n.astype(x.dtype)
        n1 = (n + 1).astype(x.dtype)
        odd = (n + n + 1).astype(x.dtype)
        theta = _arccos(y)
        inside = jnp.abs(y) < 1.0
        if kind == "t":
            at_one, at_zero, q1 = 1.0, _parity(n, 1.0, -1.0), y
            trig = (n > 6) & inside, jnp.cos(nt * theta)
        elif kind == "u":
            at_one, at_zero, q1 = n1, _parity(n, n1, -n1), two_y
            s = jnp.sin(theta)
            trig = (n > 6) & inside, jnp.where(s != 0, jnp.sin(n1 * theta) / s, n1 * jnp.cos(n1 * theta) / y)
        elif kind == "v":
            at_one, at_zero, q1 = 1.0, _parity(n, odd, -odd), two_y - 1.0
            trig = (n > 6) & inside, jnp.where(jnp.sin(theta / 2.0) != 1.0,
                                               jnp.cos((nt + 0.5) * theta) / jnp.cos(theta / 2.0), at_zero)
        else:
            at_one, at_zero, q1 = odd, _parity(n, 1.0, -1.0), two_y + 1.0
            trig = (n > 4) & inside, jnp.where(jnp.cos(theta / 2.0) != 1.0,
                                               jnp.sin((nt + 0.5) * theta) / jnp.sin(theta / 2.0), at_zero)
        return _polynomial(x, n, [(x == 1.0, at_one), (x == 0.0, at_zero), trig, (n == 0, 1.0)], q1,
                           lambda k, p, q: two_y * q - p)

    return fn


def _hermite_limit(dtype) -> int:
    # CPU returns NaN above these degrees (getHermitianLimit).
    return 128 if jnp.dtype(dtype) == jnp.float32 else 512


def _hermite_h(x, n):
    """aten::special_hermite_polynomial_h (physicists'): H_{k+1} = 2x H_k - 2k H_{k-1}."""
    two_x = x + x
    return _polynomial(x, n, [(n == 0, 1.0), (n == 1, two_x), (n > _hermite_limit(x.dtype), jnp.nan)], two_x,
                       lambda k, p, q: two_x * q - (k + k) * p)


def _hermite_he(x, n):
    """aten::special_hermite_polynomial_he (probabilists'): He_{k+1} = x He_k - k He_{k-1}."""
    return _polynomial(x, n, [(n == 0, 1.0), (n == 1, x), (n > _hermite_limit(x.dtype), jnp.nan)], x,
                       lambda k, p, q: x * q - k * p)


def _laguerre_l(x, n):
    """aten::special_laguerre_polynomial_l: (k + 1) L_{k+1} = (2k + 1 - x) L_k - k L_{k-1};
    1 at x = 0."""
    return _polynomial(x, n, [(jnp.abs(x) == 0.0, 1.0), (n == 0, 1.0)], 1.0 - x,
                       lambda k, p, q: _div_exact(((k + k) + (1.0 - x)) * q - k * p, k + 1.0))


def _legendre_p(x, n):
    """aten::special_legendre_polynomial_p: (k + 1) P_{k+1} = (2k + 1) x P_k - k P_{k-1};
    +-1 at |x| = 1."""
    return _polynomial(x, n, [
        (jnp.abs(x) == 1.0, jnp.where((x > 0) | (n % 2 == 0), 1.0, -1.0)),
        (n == 0, 1.0),
    ], x, lambda k, p, q: _div_exact((k + k + 1.0) * x * q - k * p, k + 1.0))


def _polynomial_lowering(fn):
    """Lowering of `fn(x, n)`: both arguments in the output dtype, then n truncated to an
    integer as CPU's `static_cast<int64_t>` does on x86 (NaN, infinities and values
    outside int64 become its minimum, so the polynomial is 0)."""

    def lower(x, n):
        out = _out()
        x = cast(x, out)
        n = convert(cast(n, out), jnp.int64)
        x, n = jnp.broadcast_arrays(x, n)
        return fn(x, n).astype(out)

    lower.__doc__ = fn.__doc__
    return lower


_POLYNOMIALS = {
    aten.special_chebyshev_polynomial_t: _chebyshev_t,
    aten.special_chebyshev_polynomial_u: _chebyshev_u,
    aten.special_chebyshev_polynomial_v: _chebyshev_v,
    aten.special_chebyshev_polynomial_w: _chebyshev_w,
    aten.special_shifted_chebyshev_polynomial_t: _shifted_chebyshev("t"),
    aten.special_shifted_chebyshev_polynomial_u: _shifted_chebyshev("u"),
    aten.special_shifted_chebyshev_polynomial_v: _shifted_chebyshev("v"),
    aten.special_shifted_chebyshev_polynomial_w: _shifted_chebyshev("w"),
    aten.special_hermite_polynomial_h: _hermite_h,
    aten.special_hermite_polynomial_he: _hermite_he,
    aten.special_laguerre_polynomial_l: _laguerre_l,
    aten.special_legendre_polynomial_p: _legendre_p,
}
for _op, _fn in _POLYNOMIALS.items():  # .default, .x_scalar and .n_scalar; no half kernels on CPU
    lowering(_op)(cpu_kernel_lacks_half(_op.__name__.removeprefix("special_") + "_cpu")(_polynomial_lowering(_fn)))
