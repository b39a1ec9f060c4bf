dtmc
module M
  x : [0..1] init 0;
  [] true -> 0.5 : (x'=1) + 0.5 : true;
endmodule
label "goal" = mod(x - 2, 2) = 1;
