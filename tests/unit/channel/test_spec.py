import pytest

from phy802.channel import (
    DeadLane,
    DfeBurst,
    GilbertElliott,
    Noiseless,
    Pam4Awgn,
    channel_spec,
    parse_channel,
    with_ber,
)


@pytest.mark.parametrize(
    "spec,cls",
    [
        ("none", Noiseless),
        ("awgn:snr_db=17.5", Pam4Awgn),
        ("awgn:ber=2.4e-4", Pam4Awgn),
        ("dfe:pe=1e-4,pb=0.5", DfeBurst),
        ("dfe:ber=2.4e-4,pb=0.5,alternate=0", DfeBurst),
        ("ge:p_gb=1e-4,p_bg=0.1,e_g=0,e_b=0.5", GilbertElliott),
        ("dead:mode=stuck,value=2", DeadLane),
    ],
)
def test_parse_and_round_trip(spec, cls):
    ch = parse_channel(spec)
    assert isinstance(ch, cls)
    assert parse_channel(channel_spec(ch)) == ch


def test_parse_values():
    assert parse_channel("awgn:ber=2.4e-4").ber == pytest.approx(2.4e-4)
    d = parse_channel("dfe:ber=1e-4,pb=0.75")
    assert d.ber == pytest.approx(1e-4) and d.pb == 0.75 and d.alternate


@pytest.mark.parametrize(
    "spec,msg",
    [
        ("foo", "unknown model"),
        ("awgn", "exactly one"),
        ("awgn:snr=3", "field 'snr=3'"),
        ("dfe:pe=1e-4", "needs pb"),
        ("dfe:pe=x,pb=0.5", "pe='x'"),
        ("ge:p_gb=0.1", "lacks"),
    ],
)
def test_parse_errors(spec, msg):
    with pytest.raises(ValueError, match=msg):
        parse_channel(spec)


def test_with_ber():
    for ch in (Pam4Awgn(15.0), DfeBurst(1e-3, 0.6, False), GilbertElliott(1e-3, 0.1, 1e-5, 0.1)):
        new = with_ber(ch, 3e-5)
        assert type(new) is type(ch) and new.ber == pytest.approx(3e-5)
    assert with_ber(DfeBurst(1e-3, 0.6, False), 1e-4).pb == 0.6
    with pytest.raises(ValueError):
        with_ber(Noiseless(), 1e-4)
